//! Bad options, and other errors raised while decoding: the right ERROR and
//! SQLSTATE (for options, the same as wal2json's), and the slot is left
//! usable and not advanced: the pending changes are still returned
//! afterwards.

use pubjson_e2e::{case, describe_error, diff_rows, require_wal2json, Case, TestDb};

struct BadOption {
    /// `name=value` words.
    opts: &'static str,
    sqlstate: &'static str,
    message: &'static str,
    /// wal2json 2.5 fails the same way (false for pubjson/2.6-only options).
    same_in_wal2json: bool,
}

/// Whether wal2json fails the same way.
const SAME: bool = true;
const PUBJSON_ONLY: bool = false;

const BAD: &[BadOption] = &[
    BadOption {
        opts: "x=y",
        sqlstate: "22023",
        message: r#"option "x" = "y" is unknown"#,
        same_in_wal2json: SAME,
    },
    BadOption {
        opts: "include-xids=1 format-version=2 nope=",
        sqlstate: "22023",
        message: r#"option "nope" = "" is unknown"#,
        same_in_wal2json: SAME,
    },
    BadOption {
        opts: "include-xids=v",
        sqlstate: "22023",
        message: r#"could not parse value "v" for parameter "include-xids""#,
        same_in_wal2json: SAME,
    },
    BadOption {
        opts: "format-version=2 pretty-print=maybe",
        sqlstate: "22023",
        message: r#"could not parse value "maybe" for parameter "pretty-print""#,
        same_in_wal2json: SAME,
    },
    BadOption {
        opts: "include-types=",
        sqlstate: "22023",
        message: r#"could not parse value "" for parameter "include-types""#,
        same_in_wal2json: SAME,
    },
    BadOption {
        opts: "format-version=4",
        sqlstate: "0A000",
        message: r#"client sent format_version=4 but we only support format 3 or lower"#,
        same_in_wal2json: PUBJSON_ONLY,
    },
    BadOption {
        opts: "include-pk=1 format-version=3",
        sqlstate: "22023",
        message: r#"option "include-pk" does not apply to format-version 3"#,
        same_in_wal2json: PUBJSON_ONLY,
    },
    BadOption {
        opts: "format-version=0",
        sqlstate: "0A000",
        message: r#"client sent format_version=0 but we only support format 1 or higher"#,
        same_in_wal2json: SAME,
    },
    BadOption {
        opts: "format-version=two",
        sqlstate: "22023",
        message: r#"could not parse value "two" for parameter "format-version""#,
        same_in_wal2json: SAME,
    },
    BadOption {
        opts: "actions=upsert",
        sqlstate: "22023",
        message: r#"could not parse value "upsert" for parameter "actions""#,
        same_in_wal2json: SAME,
    },
    BadOption {
        opts: "actions=insert,,delete",
        sqlstate: "42602",
        message: r#"could not parse value "insert,,delete" for parameter "actions""#,
        same_in_wal2json: SAME,
    },
    BadOption {
        opts: "add-tables=nodot",
        sqlstate: "42602",
        message: r#"could not parse value "nodot" for parameter "add-tables""#,
        same_in_wal2json: SAME,
    },
    BadOption {
        opts: "filter-tables=public.t,nodot",
        sqlstate: "42602",
        message: r#"could not parse value "public.t,nodot" for parameter "filter-tables""#,
        same_in_wal2json: SAME,
    },
    BadOption {
        opts: "filter-msg-prefixes=a,,b",
        sqlstate: "42602",
        message: r#"could not parse value "a,,b" for parameter "filter-msg-prefixes""#,
        same_in_wal2json: SAME,
    },
    BadOption {
        opts: "include-unchanged-toast=1",
        sqlstate: "42602",
        message: r#"parameter "include-unchanged-toast" was deprecated"#,
        same_in_wal2json: SAME,
    },
    // pubjson's own option, and wal2json 2.6's.
    BadOption {
        opts: "skip-empty-xacts=sometimes",
        sqlstate: "22023",
        message: r#"could not parse value "sometimes" for parameter "skip-empty-xacts""#,
        same_in_wal2json: PUBJSON_ONLY,
    },
    BadOption {
        opts: "numeric-data-types-as-string=2",
        sqlstate: "22023",
        message: r#"could not parse value "2" for parameter "numeric-data-types-as-string""#,
        same_in_wal2json: PUBJSON_ONLY,
    },
];

fn as_case(b: &BadOption) -> Case {
    let opts: Vec<(&str, &str)> = b
        .opts
        .split(' ')
        .map(|word| word.split_once('=').expect("name=value"))
        .collect();
    case(&format!("{opts:?}"), &opts)
}

/// (confirmed_flush_lsn, restart_lsn, active) of a slot.
fn slot_state(db: &mut TestDb, slot: &str) -> (String, String, bool) {
    let r = db
        .conn
        .client
        .query_one(
            "select confirmed_flush_lsn::text, restart_lsn::text, active from pg_replication_slots where slot_name = $1",
            &[&slot],
        )
        .expect("pg_replication_slots");
    (r.get(0), r.get(1), r.get(2))
}

#[test]
fn bad_options_fail_cleanly_and_consume_nothing() {
    require_wal2json!();
    let (mut db, slots) = TestDb::with_slot_pair(
        "opts",
        "create table e2e_opts.t (id int primary key, v text)",
    );
    let good = case("good", &[("format-version", "2"), ("include-xids", "1")]);
    let good_full = good.with("", &[("skip-empty-xacts", "false")]);

    for (i, bad) in BAD.iter().enumerate() {
        let c = as_case(bad);
        // One pending transaction per round.
        db.run(&[&format!("insert into e2e_opts.t values ({i}, 'round {i}')")]);
        let before = (
            slot_state(&mut db, &slots.pubjson),
            slot_state(&mut db, &slots.wal2json),
        );

        let err = match db.get(&slots.pubjson, &c.opts) {
            Ok((rows, _)) => panic!(
                "{}: pubjson accepted the options and returned {} rows",
                c.label,
                rows.len()
            ),
            Err(e) => e,
        };
        let db_err = err
            .as_db_error()
            .unwrap_or_else(|| panic!("{}: not a server error: {err}", c.label));
        assert_eq!(
            (db_err.code().code(), db_err.message()),
            (bad.sqlstate, bad.message),
            "{}: pubjson's error ({})",
            c.label,
            describe_error(&err)
        );
        if bad.same_in_wal2json {
            let w2j_err = db
                .get(&slots.wal2json, &c.opts)
                .expect_err("wal2json accepted the options");
            let w2j = w2j_err.as_db_error().expect("server error");
            assert_eq!(
                (w2j.code().code(), w2j.message()),
                (bad.sqlstate, bad.message),
                "{}: wal2json fails differently (the expected text is wrong?)",
                c.label
            );
        }

        // Nothing moved, nobody holds the slot.
        let after = (
            slot_state(&mut db, &slots.pubjson),
            slot_state(&mut db, &slots.wal2json),
        );
        assert_eq!(before, after, "{}: slot state changed", c.label);
        assert!(!after.0 .2 && !after.1 .2, "{}: slot left active", c.label);

        // The pending transaction is still there, in both slots.
        let (pj, _) = db
            .get(&slots.pubjson, &good_full.opts)
            .unwrap_or_else(|e| panic!("{}: {}", c.label, describe_error(&e)));
        let (w2j, _) = db
            .get(&slots.wal2json, &good.opts)
            .unwrap_or_else(|e| panic!("{}: {}", c.label, describe_error(&e)));
        if let Some(d) = diff_rows("wal2json", &w2j, "pubjson", &pj) {
            panic!("{}: {d}", c.label);
        }
        assert_eq!(pj.len(), 3, "{}: B, I, C expected: {pj:#?}", c.label);
        assert!(
            pj[1].data.contains(&format!(r#""value":"round {i}""#)),
            "{}: {}",
            c.label,
            pj[1].data
        );
        // And now it is consumed.
        assert!(db
            .peek(&slots.pubjson, &good.opts)
            .expect("peek")
            .0
            .is_empty());
        println!(
            "[opts] {:<75} {} {} ok; pending changes intact",
            c.label, bad.sqlstate, bad.message
        );
    }
}

/// The server runs with RUST_BACKTRACE=1 (scripts/cluster.sh): errors
/// raised through Rust still reach the client as message, DETAIL and HINT
/// only, without the Rust backtrace pgrx would put into the DETAIL.
#[test]
fn errors_reach_clients_without_rust_backtraces() {
    let mut db = TestDb::new("bt");
    let pid: i32 = db
        .conn
        .client
        .query_one("select pg_backend_pid()", &[])
        .expect("pg_backend_pid")
        .get(0);
    // A backend's process title overwrites its copy of the environment
    // block: read the postmaster's (the backend's parent).
    let stat =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read the backend's stat");
    let after_name = &stat[stat.rfind(')').expect("stat has (comm)") + 2..];
    let postmaster = after_name.split(' ').nth(1).expect("ppid field");
    let environ = std::fs::read(format!("/proc/{postmaster}/environ"))
        .expect("read the postmaster's environment");
    assert!(
        environ.split(|&b| b == 0).any(|v| v == b"RUST_BACKTRACE=1"),
        "the test cluster must run with RUST_BACKTRACE=1 (scripts/cluster.sh start sets it)"
    );
    db.exec("create table e2e_bt.t (id int primary key)");
    let (slot, _guard) = db.create_slot("pubjson", "bt");
    db.run(&["insert into e2e_bt.t values (1)"]);
    let mut errors = 0;
    for opts in [
        &[("format-version", "9")][..],
        &[("include-xids", "maybe")],
        &[
            ("proto_version", "1"),
            ("publication_names", "e2e_bt_missing"),
        ],
    ] {
        let Err(err) = db.peek(&slot, &case("bt", opts).opts) else {
            continue; // PostgreSQL 18's pgoutput skips a missing publication
        };
        let e = err
            .as_db_error()
            .unwrap_or_else(|| panic!("{opts:?}: not a server error: {err}"));
        errors += 1;
        for text in [Some(e.message()), e.detail(), e.hint()]
            .into_iter()
            .flatten()
        {
            for frame_text in [
                "pubjson::",
                "pgrx",
                "backtrace",
                "rust_begin_unwind",
                ".rs:",
            ] {
                assert!(
                    !text.contains(frame_text),
                    "{opts:?}: {frame_text:?} in what the client got: {text}"
                );
            }
        }
    }
    assert!(errors >= 2, "the bad options did not fail");
}

/// An ERROR raised while PostgreSQL stores the output: the SQL function's
/// result spills past `temp_file_limit` inside OutputPluginWrite, while the
/// decoding context's buffer is pubjson's own message (lent for the write,
/// not copied). A clean ERROR for every format; the session and the slot
/// stay usable, nothing is consumed, and the output afterwards is what it
/// was before.
#[test]
fn an_error_while_the_output_is_stored_consumes_nothing() {
    let mut db = TestDb::new("store");
    db.exec("create table e2e_store.t (id int primary key, v text)");
    let (slot, _guard) = db.create_slot("pubjson", "store");
    // About 500 kB of output in every format: past 64 kB of temp file.
    db.run(&["insert into e2e_store.t select g, repeat('x', 200) from generate_series(1, 2000) g"]);
    for version in ["1", "2", "3"] {
        let c = case(&format!("format {version}"), &[("format-version", version)]);
        let expected = db
            .peek(&slot, &c.opts)
            .unwrap_or_else(|e| panic!("{}: {}", c.label, describe_error(&e)))
            .0;
        let before = slot_state(&mut db, &slot);

        db.exec("set work_mem = '64kB'; set temp_file_limit = '64kB'");
        let err = db
            .get(&slot, &c.opts)
            .expect_err("the result fit in 64 kB of temporary file");
        db.exec("reset work_mem; reset temp_file_limit");
        let e = err
            .as_db_error()
            .unwrap_or_else(|| panic!("{}: not a server error: {err}", c.label));
        assert_eq!(
            e.code().code(),
            "53400",
            "{}: {}",
            c.label,
            describe_error(&err)
        );
        assert!(
            e.message().contains("temp_file_limit"),
            "{}: {}",
            c.label,
            e.message()
        );

        assert_eq!(
            slot_state(&mut db, &slot),
            before,
            "{}: slot moved",
            c.label
        );
        let after = db
            .peek(&slot, &c.opts)
            .unwrap_or_else(|e| panic!("{}: {}", c.label, describe_error(&e)))
            .0;
        assert!(
            expected.len() > 1 || version == "1",
            "{}: {expected:?}",
            c.label
        );
        assert_eq!(
            after, expected,
            "{}: output changed after the ERROR",
            c.label
        );
    }
}
