//! PostgreSQL's logical decoding scenarios through pubjson: the suite of
//! `tests/isolation.rs` runs pubjson's own isolation specs
//! (`e2e/isolation/*.spec`, written after the interleavings of
//! contrib/test_decoding's specs) with PostgreSQL's `isolationtester`, and
//! compares what pubjson decodes with what test_decoding and pgoutput decode
//! from the same WAL.
//!
//! How a spec is written: its slot-creating step calls
//! `iso.create_slots([prefix])`, which creates a pubjson slot `<prefix>_pj`
//! (default prefix `iso`) and copies it (same starting point, same
//! snapshot) to a test_decoding slot `<prefix>_td` and a pgoutput slot
//! `<prefix>_pgo`; its decoding steps `CALL iso.decode([prefix [, pubs]])`
//! instead of `pg_logical_slot_get_changes`; its teardown calls
//! `iso.drop_slots([prefix])`. `CALL iso.decode(prefix, pubs, true)` makes
//! pubjson stream (`streaming` on, logical_decoding_work_mem 64kB; its
//! streamed blocks are put back together before the comparison, and none
//! may be empty). `iso.decode` first emits a non-transactional message (prefix `iso_flush`, left out of every comparison), commits and
//! waits until the WAL writer has flushed it, so that no decoding call waits
//! for an open transaction's record to be flushed; then, up to the flushed
//! position, it peeks test_decoding, pubjson format 2 and format 3 without
//! and with `publication_names` (`pubs`, default `iso_all`, a publication
//! FOR ALL TABLES) and pgoutput with `pubs`, then consumes the three slots,
//! and writes everything as one JSON document (hex-encoded, so COPY escapes
//! nothing) to a file of the run's directory, named by its sequence number.
//! Nothing it does assigns a transaction id.
//!
//! The harness runs each permutation of a spec as its own isolationtester
//! run (the spec's text with that one permutation line), on a cluster of
//! the test's own (slot creation waits for every running transaction of the
//! cluster; CHECKPOINTs move every slot's restart point), and for each
//! decoding call requires: test_decoding and pubjson formats 2 and 3 give
//! the same transactions (xids), the same changes in the same order with
//! the same values (both read into one canonical form: PostgreSQL's text of
//! each value, booleans `t`/`f`, old keys without NULLs); pgoutput and
//! pubjson formats 2 and 3 with `publication_names` likewise; and what each
//! slot consumed equals what was peeked from it. A permutation must make as
//! many decoding calls as its steps name (an erroring call writes no file).

use crate::change_stream::{show_items, Change, Item, Old};
use crate::cluster::run;
use crate::env::{fresh_dir, note_skip, pg_bin, pg_bin_dir, tmp_root};
use crate::pgoutput_proto::decode_pgoutput;
use crate::pubjson_reader::{read_format3, read_pubjson};
use crate::stream_comparison::{pair_items, Paired};
use crate::test_decoding_reader::read_test_decoding_rows;
use crate::{exec, Place, Server};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The database the specs run in, on the test's own cluster.
pub const DATABASE: &str = "iso";

/// How long one permutation may take before it is killed.
const PERMUTATION_TIMEOUT: Duration = Duration::from_secs(180);

/// The helpers the specs call, and the publication `iso_all`.
const SETUP_SQL: &str = r#"
CREATE SCHEMA iso;
-- Unlogged: not published, not decoded.
CREATE UNLOGGED TABLE iso.conf (dir text NOT NULL);
CREATE PUBLICATION iso_all FOR ALL TABLES;

CREATE FUNCTION iso.create_slots(prefix text DEFAULT 'iso', two_phase boolean DEFAULT false)
RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM pg_create_logical_replication_slot(prefix || '_pj', 'pubjson', false, two_phase);
  PERFORM pg_copy_logical_replication_slot(prefix || '_pj', prefix || '_td', false, 'test_decoding');
  PERFORM pg_copy_logical_replication_slot(prefix || '_pj', prefix || '_pgo', false, 'pgoutput');
  RETURN 'init';
END $$;

CREATE FUNCTION iso.drop_slots(prefix text DEFAULT 'iso')
RETURNS text LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  PERFORM pg_drop_replication_slot(slot_name) FROM pg_replication_slots
    WHERE slot_name IN (prefix || '_pj', prefix || '_td', prefix || '_pgo');
  RETURN 'stop';
END $$;

-- The rows of one decoding call as a JSON array of text (bytea: hex).
CREATE FUNCTION iso.rows(slot text, upto pg_lsn, consume boolean, opts text[])
RETURNS json LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE r json;
BEGIN
  IF consume THEN
    SELECT coalesce(json_agg(d.data ORDER BY d.n), '[]') INTO r
      FROM pg_logical_slot_get_changes(slot::name, upto, NULL, VARIADIC opts)
           WITH ORDINALITY AS d(lsn, xid, data, n);
  ELSE
    SELECT coalesce(json_agg(d.data ORDER BY d.n), '[]') INTO r
      FROM pg_logical_slot_peek_changes(slot::name, upto, NULL, VARIADIC opts)
           WITH ORDINALITY AS d(lsn, xid, data, n);
  END IF;
  RETURN r;
END $$;

CREATE FUNCTION iso.binary_rows(slot text, upto pg_lsn, consume boolean, opts text[])
RETURNS json LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE r json;
BEGIN
  IF consume THEN
    SELECT coalesce(json_agg(encode(d.data, 'hex') ORDER BY d.n), '[]') INTO r
      FROM pg_logical_slot_get_binary_changes(slot::name, upto, NULL, VARIADIC opts)
           WITH ORDINALITY AS d(lsn, xid, data, n);
  ELSE
    SELECT coalesce(json_agg(encode(d.data, 'hex') ORDER BY d.n), '[]') INTO r
      FROM pg_logical_slot_peek_binary_changes(slot::name, upto, NULL, VARIADIC opts)
           WITH ORDINALITY AS d(lsn, xid, data, n);
  END IF;
  RETURN r;
END $$;

-- A procedure (it commits), so no SET clause: every name is qualified.
CREATE PROCEDURE iso.decode(prefix text DEFAULT 'iso', pubs text DEFAULT 'iso_all',
                            stream boolean DEFAULT false)
LANGUAGE plpgsql AS $$
DECLARE
  marker pg_catalog.pg_lsn;
  upto pg_catalog.pg_lsn;
  outdir text;
  seq bigint;
  td text[] := ARRAY['include-xids', '1', 'skip-empty-xacts', '1'];
  f2 text[] := ARRAY['format-version', '2', 'include-xids', '1', 'include-types', '0'];
  f3 text[] := ARRAY['format-version', '3'];
  f2p text[];
  f3p text[];
  pgo text[] := ARRAY['proto_version', '1', 'publication_names', pubs];
  p_td json; p_f2 json; p_f3 json; p_f2p json; p_f3p json; p_pgo json;
  g_td json; g_pj json; g_pgo json;
BEGIN
  -- No xid: the commit leaves the flush to the WAL writer (within
  -- wal_writer_delay), which flushes everything before the marker too.
  -- The function returns where the marker's record ends.
  marker := pg_catalog.pg_logical_emit_message(false, 'iso_flush', '');
  COMMIT;
  FOR i IN 1..3000 LOOP
    EXIT WHEN pg_catalog.pg_current_wal_flush_lsn() OPERATOR(pg_catalog.>=) marker;
    PERFORM pg_catalog.pg_sleep(0.01);
  END LOOP;
  upto := pg_catalog.pg_current_wal_flush_lsn();
  IF upto OPERATOR(pg_catalog.<) marker THEN
    RAISE EXCEPTION 'iso.decode: WAL not flushed past % within 30 s', marker;
  END IF;
  IF stream THEN
    -- pubjson streams what exceeds 64kB (test_decoding and pgoutput do
    -- not: their whole transactions are what the streams must add up to).
    PERFORM pg_catalog.set_config('logical_decoding_work_mem', '64kB', true);
    f2 := f2 OPERATOR(pg_catalog.||) ARRAY['streaming', 'on'];
    f3 := f3 OPERATOR(pg_catalog.||) ARRAY['streaming', 'on'];
  END IF;
  f2p := f2 OPERATOR(pg_catalog.||) ARRAY['publication_names', pubs];
  f3p := f3 OPERATOR(pg_catalog.||) ARRAY['publication_names', pubs];
  p_td := iso.rows(prefix || '_td', upto, false, td);
  p_f2 := iso.rows(prefix || '_pj', upto, false, f2);
  p_f3 := iso.rows(prefix || '_pj', upto, false, f3);
  p_f2p := iso.rows(prefix || '_pj', upto, false, f2p);
  p_f3p := iso.rows(prefix || '_pj', upto, false, f3p);
  p_pgo := iso.binary_rows(prefix || '_pgo', upto, false, pgo);
  g_td := iso.rows(prefix || '_td', upto, true, td);
  g_pj := iso.rows(prefix || '_pj', upto, true, f2);
  g_pgo := iso.binary_rows(prefix || '_pgo', upto, true, pgo);
  SELECT c.dir INTO STRICT outdir FROM iso.conf c;
  SELECT pg_catalog.count(*) INTO seq FROM pg_catalog.pg_ls_dir(outdir);
  EXECUTE pg_catalog.format('COPY (SELECT pg_catalog.encode(pg_catalog.convert_to(%L, %L), %L)) TO %L',
    pg_catalog.json_build_object('prefix', prefix, 'pubs', pubs, 'upto', upto::text,
      'td', p_td, 'f2', p_f2, 'f3', p_f3, 'f2p', p_f2p, 'f3p', p_f3p, 'pgo', p_pgo,
      'td_get', g_td, 'pj_get', g_pj, 'pgo_get', g_pgo)::text,
    'UTF8', 'hex',
    outdir OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) pg_catalog.lpad(seq::text, 4, '0')
      OPERATOR(pg_catalog.||) '.hex');
END $$;
"#;

/// PostgreSQL's isolationtester for the server under test: pgxs's
/// `src/test/isolation/isolationtester` (Debian: postgresql-server-dev;
/// PyPI's trees carry it), or why there is none.
pub fn isolationtester() -> Result<PathBuf, String> {
    let out = Command::new(pg_bin("pg_config"))
        .arg("--pgxs")
        .output()
        .map_err(|e| format!("pg_config --pgxs: {e}"))?;
    let pgxs = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let dir = pgxs
        .parent()
        .ok_or_else(|| format!("pg_config --pgxs gave {}", pgxs.display()))?;
    let tester = dir.join("../test/isolation/isolationtester");
    if tester.exists() {
        Ok(tester)
    } else {
        Err(format!(
            "no isolationtester at {} for the server of {} (PostgreSQL's server development files ship it)",
            tester.display(),
            pg_bin_dir().display()
        ))
    }
}

/// A spec: its text without permutation lines, the permutations, and the
/// names of its decoding steps.
pub struct Spec {
    pub name: String,
    pub header: String,
    pub permutations: Vec<String>,
    pub decode_steps: Vec<String>,
}

impl Spec {
    /// `e2e/isolation/<name>.spec`.
    pub fn load(name: &str) -> Spec {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("isolation")
            .join(format!("{name}.spec"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let mut header = String::new();
        let mut permutations = Vec::new();
        let mut decode_steps = Vec::new();
        for line in text.lines() {
            let t = line.trim_start();
            if t.starts_with("permutation") {
                permutations.push(line.to_string());
                continue;
            }
            if let Some(rest) = t.strip_prefix("step ") {
                if line.contains("iso.decode") {
                    let name = rest.split_whitespace().next().unwrap_or("");
                    decode_steps.push(name.trim_matches('"').to_string());
                }
            }
            header.push_str(line);
            header.push('\n');
        }
        assert!(!permutations.is_empty(), "{name}.spec has no permutation");
        Spec {
            name: name.to_string(),
            header,
            permutations,
            decode_steps,
        }
    }

    /// The decoding calls `permutation` makes.
    fn decode_calls(&self, permutation: &str) -> usize {
        permutation
            .split_whitespace()
            .skip(1)
            .map(|s| s.trim_matches('"'))
            .filter(|s| self.decode_steps.iter().any(|d| d == s))
            .count()
    }
}

/// What a spec's runs compared.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    pub permutations: usize,
    pub decode_calls: usize,
    /// Transactions and changes of test_decoding compared with pubjson's
    /// format 2 (the same ones are compared with format 3).
    pub txns: usize,
    pub changes: usize,
    /// Changes of pgoutput compared with pubjson under `publication_names`.
    pub pub_changes: usize,
    /// Values compared (columns of new and old rows), all comparisons.
    pub values: usize,
    /// Streamed blocks pubjson's format 2 sent (`S` objects).
    pub streamed_blocks: usize,
    /// COMMIT PREPARED events pubjson's format 2 sent (`CP` objects).
    pub commits_prepared: usize,
    /// What isolationtester printed, per permutation.
    pub outputs: Vec<String>,
}

/// Runs every permutation of spec `name` on a cluster of its own at
/// `place`; `None` (noted as a skip) without isolationtester.
pub fn run_spec(place: Place, name: &str) -> Option<Totals> {
    let test = format!("isolation::{name}");
    let tester = match isolationtester() {
        Ok(t) => t,
        Err(why) => {
            note_skip(&test, &why);
            return None;
        }
    };
    let spec = Spec::load(name);
    let started = Instant::now();
    let cluster = place.start();
    let server = cluster.server();
    let mut admin = server.fresh_database(DATABASE);
    exec(&mut admin, SETUP_SQL);
    let root = tmp_root().join(format!("pubjson-isolation-{name}-{}", std::process::id()));
    fresh_dir(&root);
    let mut totals = Totals::default();
    println!("[{name}] cluster ready in {:.1?}", started.elapsed());
    for (n, permutation) in spec.permutations.iter().enumerate() {
        let dir = root.join(format!("p{n:02}"));
        // The server writes the decoding calls' files into calls/.
        let calls_dir = dir.join("calls");
        fresh_dir(&calls_dir);
        run(Command::new("chown").args(["postgres:", &calls_dir.display().to_string()]));
        admin
            .execute("delete from iso.conf", &[])
            .expect("iso.conf");
        admin
            .execute(
                "insert into iso.conf values ($1)",
                &[&calls_dir.display().to_string()],
            )
            .expect("iso.conf");
        let label = format!("[{name} permutation {n}: {}]", permutation.trim());
        let run_started = Instant::now();
        let output = run_permutation(&tester, &server, &spec, permutation, &dir, &label);
        let run_took = run_started.elapsed();
        let calls = decode_files(&calls_dir);
        assert_eq!(
            calls.len(),
            spec.decode_calls(permutation),
            "{label}: decoding calls that wrote their output; isolationtester printed:\n{output}"
        );
        for (k, doc) in calls.iter().enumerate() {
            compare_call(doc, &mut totals).unwrap_or_else(|e| {
                panic!("{label} decoding call {k}: {e}\n\nisolationtester printed:\n{output}")
            });
            totals.decode_calls += 1;
        }
        if std::env::var_os("PUBJSON_ISO_SHOW").is_some() {
            println!("{label} ran in {run_took:.1?}\n{output}");
        }
        totals.permutations += 1;
        totals.outputs.push(output);
    }
    let _ = std::fs::remove_dir_all(&root);
    println!(
        "[{name}] {} permutations, {} decoding calls: {} transactions and {} changes of test_decoding \
         equal in pubjson formats 2 and 3, {} changes of pgoutput equal under publication_names, \
         {} values compared, {} streamed blocks, in {:.1?}",
        totals.permutations,
        totals.decode_calls,
        totals.txns,
        totals.changes,
        totals.pub_changes,
        totals.values,
        totals.streamed_blocks,
        started.elapsed()
    );
    Some(totals)
}

/// Runs one permutation; returns what isolationtester printed. Panics when
/// it fails or takes longer than [`PERMUTATION_TIMEOUT`].
fn run_permutation(
    tester: &Path,
    server: &Server,
    spec: &Spec,
    permutation: &str,
    dir: &Path,
    label: &str,
) -> String {
    let spec_path = dir.join("spec");
    std::fs::write(&spec_path, format!("{}\n{permutation}\n", spec.header)).expect("write spec");
    let out_path = dir.join("output");
    let conninfo = format!(
        "host={} port={} user=postgres dbname={DATABASE}",
        server.host, server.port
    );
    let mut child = Command::new(tester)
        .arg(&conninfo)
        .stdin(std::fs::File::open(&spec_path).expect("open spec"))
        .stdout(std::fs::File::create(&out_path).expect("create output"))
        .stderr(Stdio::from(
            std::fs::File::create(dir.join("stderr")).expect("create stderr"),
        ))
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", tester.display()));
    let deadline = Instant::now() + PERMUTATION_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait isolationtester") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{label}: isolationtester did not finish within {PERMUTATION_TIMEOUT:?}; it printed:\n{}",
                std::fs::read_to_string(&out_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
    assert!(
        status.success(),
        "{label}: isolationtester {status}:\n{output}\n{stderr}"
    );
    assert!(
        !output.contains("iso.decode: WAL not flushed"),
        "{label}: a decoding call could not flush the WAL:\n{output}"
    );
    output
}

/// The documents the decoding calls of one run wrote, in order.
fn decode_files(dir: &Path) -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read run directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "hex"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            let hex = std::fs::read_to_string(p).expect("read output");
            let bytes = unhex(hex.trim()).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        })
        .collect()
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err("odd number of hex digits".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

fn texts(doc: &Value, key: &str) -> Result<Vec<String>, String> {
    doc[key]
        .as_array()
        .ok_or_else(|| format!("no {key} in the call's output"))?
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{key}: a row is not text"))
        })
        .collect()
}

/// Compares everything one decoding call returned.
fn compare_call(doc: &Value, totals: &mut Totals) -> Result<(), String> {
    for (peeked, got) in [("td", "td_get"), ("f2", "pj_get"), ("pgo", "pgo_get")] {
        if doc[peeked] != doc[got] {
            return Err(format!(
                "what was consumed ({got}) differs from what was peeked ({peeked}):\n{}\n{}",
                doc[peeked], doc[got]
            ));
        }
    }
    for key in ["f2", "f3", "f2p", "f3p"] {
        // A format 3 row is a message of one object per line.
        let empty = empty_blocks(&crate::message_lines(&texts(doc, key)?))?;
        if empty > 0 {
            return Err(format!(
                "{key}: {empty} streamed block(s) without a change (a transaction with nothing to send is not streamed):\n{}",
                doc[key]
            ));
        }
    }
    totals.streamed_blocks += texts(doc, "f2")?
        .iter()
        .filter(|r| r.starts_with(r#"{"action":"S""#))
        .count();
    totals.commits_prepared += texts(doc, "f2")?
        .iter()
        .filter(|r| r.starts_with(r#"{"action":"CP""#))
        .count();
    let td = read_test_decoding_rows(&texts(doc, "td")?)?;
    let f2 = read_pubjson(&texts(doc, "f2")?)?;
    let f3 = read_format3(&texts(doc, "f3")?)?;
    let f2p = read_pubjson(&texts(doc, "f2p")?)?;
    let f3p = read_format3(&texts(doc, "f3p")?)?;
    let pgo_rows = texts(doc, "pgo")?
        .iter()
        .map(|h| unhex(h))
        .collect::<Result<Vec<_>, _>>()?;
    let pgo = decode_pgoutput(&pgo_rows)?;
    let (txns, changes, v1) = compare_canonical(("test_decoding", &td), ("format 2", &f2), false)?;
    let (_, _, v2) = compare_canonical(("test_decoding", &td), ("format 3", &f3), true)?;
    let (_, pub_changes, v3) = compare_canonical(
        ("pgoutput", &pgo),
        ("format 2 with publication_names", &f2p),
        false,
    )?;
    let (_, _, v4) = compare_canonical(
        ("pgoutput", &pgo),
        ("format 3 with publication_names", &f3p),
        true,
    )?;
    totals.txns += txns;
    totals.changes += changes;
    totals.pub_changes += pub_changes;
    totals.values += v1 + v2 + v3 + v4;
    Ok(())
}

/// Streamed blocks (`S` … `E`) of pubjson's rows that hold no change.
fn empty_blocks(rows: &[String]) -> Result<usize, String> {
    let (mut empty, mut open) = (0, None::<usize>);
    for row in rows {
        let v: Value = serde_json::from_str(row).map_err(|e| format!("{e}: {row}"))?;
        match v["action"].as_str() {
            Some("S") => open = Some(0),
            Some("E") => {
                if open == Some(0) {
                    empty += 1;
                }
                open = None;
            }
            Some(_) => {
                if let Some(n) = open.as_mut() {
                    *n += 1;
                }
            }
            None => return Err(format!("a row without action: {row}")),
        }
    }
    Ok(empty)
}

/// Leaves out the decoding calls' own flush markers.
fn without_markers(items: &[Item]) -> Vec<Item> {
    let marker = |c: &Change| c.message.as_ref().is_some_and(|m| m.prefix == "iso_flush");
    items
        .iter()
        .filter(|i| !matches!(i, Item::Loose(c) if marker(c)))
        .cloned()
        .collect()
}

/// An old key or row without its NULLs (test_decoding leaves them out,
/// pgoutput's key tuples have NULLs for the other columns).
fn old_values(old: &Option<Old>) -> Option<BTreeMap<String, String>> {
    old.as_ref().map(|o| {
        o.cols
            .iter()
            .filter_map(|(n, v)| v.clone().map(|v| (n.clone(), v)))
            .collect()
    })
}

/// One change in the canonical form; returns the number of values compared.
fn compare_change(x: &Change, y: &Change, unchanged_known: bool) -> Result<usize, String> {
    if (x.action, &x.relation) != (y.action, &y.relation) {
        return Err("action or relation differs".into());
    }
    if x.message != y.message {
        return Err("message differs".into());
    }
    if x.new != y.new {
        return Err("new row differs".into());
    }
    if unchanged_known && x.unchanged != y.unchanged {
        return Err("unchanged TOAST columns differ".into());
    }
    let (ox, oy) = (old_values(&x.old), old_values(&y.old));
    match (&ox, &oy) {
        (Some(a), Some(b)) if a != b => return Err("old key or row differs".into()),
        (Some(_), Some(_)) | (None, None) => {}
        // An UPDATE that did not change its key: one plugin sends no old
        // key, the other repeats the new row's key values.
        (Some(m), None) | (None, Some(m)) if x.action == 'U' => {
            let new: BTreeMap<String, Option<String>> =
                x.new.clone().unwrap_or_default().into_iter().collect();
            if m.iter().any(|(k, v)| new.get(k) != Some(&Some(v.clone()))) {
                return Err("old key on one side only, and it is not the new row's".into());
            }
        }
        _ => return Err("old key or row on one side only".into()),
    }
    Ok(x.new.as_ref().map_or(0, Vec::len) + ox.map_or(0, |m| m.len()))
}

/// Compares two decoded streams in the canonical form: the same items, the
/// same transactions (xids), the same changes in the same order; returns
/// (transactions, changes, values) compared.
pub fn compare_canonical(
    (a_name, a): (&str, &[Item]),
    (b_name, b): (&str, &[Item]),
    unchanged_known: bool,
) -> Result<(usize, usize, usize), String> {
    let (a, b) = (without_markers(a), without_markers(b));
    let dump = || {
        format!(
            "\n--- {a_name} ---\n{}\n--- {b_name} ---\n{}",
            show_items(&a, 150),
            show_items(&b, 150)
        )
    };
    if a.len() != b.len() {
        return Err(format!(
            "{a_name} has {} transactions or loose changes, {b_name} {}{}",
            a.len(),
            b.len(),
            dump()
        ));
    }
    let (mut txns, mut changes, mut values) = (0, 0, 0);
    for (n, pair) in a.iter().zip(&b).enumerate() {
        let (ca, cb) =
            match pair_items(n, (a_name, pair.0), (b_name, pair.1)).map_err(|e| e + &dump())? {
                Paired::Txn(_, ca, cb) => {
                    txns += 1;
                    (ca, cb)
                }
                Paired::Loose(x, y) => (vec![x.clone()], vec![y.clone()]),
            };
        for (k, (x, y)) in ca.iter().zip(&cb).enumerate() {
            values += compare_change(x, y, unchanged_known).map_err(|e| {
                format!(
                    "item {n}, change {k}: {e}\n    {a_name}: {x}\n    {b_name}: {y}{}",
                    dump()
                )
            })?;
            changes += 1;
        }
    }
    Ok((txns, changes, values))
}

#[cfg(test)]
mod unit {
    use super::*;
    use crate::test_decoding_reader::read_test_decoding_rows;

    fn rows(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn test_decoding_values_are_kept() {
        let items = read_test_decoding_rows(&rows(&[
            "BEGIN 740",
            r#"table public."Odd ""name""": INSERT: id[integer]:1 "a b"[text]:'it''s: x[y]:z' f[double precision]:-1.5 b[boolean]:true n[text]:null arr[integer[]]:'{1,2}'"#,
            "table public.t: UPDATE: old-key: id[integer]:1 new-tuple: id[integer]:2 big[text]:unchanged-toast-datum",
            "table public.t: DELETE: id[integer]:2",
            "table public.a, public.b: TRUNCATE: (no-flags)",
            "message: transactional: 1 prefix: p, sz: 5 content:a b:c",
            "COMMIT 740",
            "message: transactional: 0 prefix: iso_flush, sz: 0 content:",
        ]))
        .expect("parses");
        assert_eq!(items.len(), 2);
        let Item::Txn { xid, changes } = &items[0] else {
            panic!("not a transaction")
        };
        assert_eq!(*xid, 740);
        assert_eq!(changes.len(), 6);
        assert_eq!(changes[0].relation, "public.Odd \"name\"");
        let v = |s: &str| Some(s.to_string());
        assert_eq!(
            changes[0].new,
            Some(vec![
                ("id".into(), v("1")),
                ("a b".into(), v("it's: x[y]:z")),
                ("f".into(), v("-1.5")),
                ("b".into(), v("t")),
                ("n".into(), None),
                ("arr".into(), v("{1,2}")),
            ])
        );
        assert_eq!(
            changes[1].old.as_ref().map(|o| o.cols.clone()),
            Some(vec![("id".into(), v("1"))])
        );
        assert_eq!(changes[1].new, Some(vec![("id".into(), v("2"))]));
        assert_eq!(changes[1].unchanged, vec!["big".to_string()]);
        assert_eq!(changes[2].action, 'D');
        assert_eq!(
            (changes[3].action, changes[4].relation.as_str()),
            ('T', "public.b")
        );
        assert_eq!(
            changes[5].message.as_ref().map(|m| m.content.clone()),
            Some(b"a b:c".to_vec())
        );
        assert!(without_markers(&items).len() == 1);
        assert!(read_test_decoding_rows(&rows(&[
            "BEGIN 1",
            "table public.t: INSERT: id[integer]:'x"
        ]))
        .is_err());
        assert!(read_test_decoding_rows(&rows(&["BEGIN 1", "COMMIT 2"])).is_err());
    }

    #[test]
    fn streamed_blocks_are_put_back_together() {
        let ins = |xid: u32, id: u32| {
            format!(
                r#"{{"action":"I","xid":{xid},"schema":"public","table":"t","columns":[{{"name":"id","value":{id}}}]}}"#
            )
        };
        let lines = [
            r#"{"action":"S","xid":9,"first":true}"#.to_string(),
            ins(9, 1),
            r#"{"action":"E","xid":9}"#.to_string(),
            r#"{"action":"S","xid":9,"first":false}"#.to_string(),
            ins(10, 2),
            ins(9, 3),
            r#"{"action":"E","xid":9}"#.to_string(),
            r#"{"action":"A","xid":9,"subxid":10,"lsn":"0/1"}"#.to_string(),
            r#"{"action":"C","xid":9,"streamed":true}"#.to_string(),
        ];
        let items = read_pubjson(&lines).expect("parses");
        let Item::Txn { xid, changes } = &items[0] else {
            panic!("not a transaction")
        };
        assert_eq!((*xid, items.len()), (9, 1));
        let ids: Vec<_> = changes
            .iter()
            .map(|c| c.new.clone().unwrap()[0].1.clone())
            .collect();
        assert_eq!(ids, [Some("1".to_string()), Some("3".to_string())]);
        assert_eq!(empty_blocks(&lines), Ok(0));
        let empty = [
            r#"{"action":"S","xid":9,"first":true}"#.to_string(),
            r#"{"action":"E","xid":9}"#.to_string(),
        ];
        assert_eq!(empty_blocks(&empty), Ok(1));
    }

    #[test]
    fn canonical_comparison_has_teeth() {
        let td = read_test_decoding_rows(&rows(&[
            "BEGIN 7",
            "table public.t: INSERT: id[integer]:1 v[text]:'a'",
            "table public.t: UPDATE: id[integer]:1 v[text]:'b'",
            "COMMIT 7",
        ]))
        .expect("parses");
        let f2 = |v1: &str, v2: &str, xid: u32| {
            read_pubjson(&rows(&[
                &format!(r#"{{"action":"B","xid":{xid}}}"#),
                &format!(r#"{{"action":"I","schema":"public","table":"t","columns":[{{"name":"id","value":1}},{{"name":"v","value":"{v1}"}}]}}"#),
                &format!(r#"{{"action":"U","schema":"public","table":"t","columns":[{{"name":"id","value":1}},{{"name":"v","value":"{v2}"}}],"identity":[{{"name":"id","value":1}}]}}"#),
                r#"{"action":"C"}"#,
            ]))
            .expect("parses")
        };
        let same = compare_canonical(("td", &td), ("f2", &f2("a", "b", 7)), false).expect("equal");
        assert_eq!(same, (1, 2, 4));
        for other in [f2("a", "c", 7), f2("x", "b", 7), f2("a", "b", 8)] {
            assert!(compare_canonical(("td", &td), ("f2", &other), false).is_err());
        }
        let f3 = read_format3(&rows(&[
            r#"{"action":"B","xid":7}"#,
            r#"{"action":"R","relid":5,"schema":"public","table":"t","identity":"default","columns":[{"name":"v","attnum":2},{"name":"id","attnum":1}]}"#,
            r#"{"action":"I","relid":5,"schema":"public","table":"t","new":{"v":"a","id":1}}"#,
            r#"{"action":"U","relid":5,"schema":"public","table":"t","new":{"id":1,"v":"b"}}"#,
            r#"{"action":"C","xid":7,"changes":2}"#,
        ]))
        .expect("parses");
        compare_canonical(("td", &td), ("f3", &f3), true).expect("equal");
    }
}
