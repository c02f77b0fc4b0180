//! The SQL surface under attack (the CVE-2018-1058 class): a role that may
//! create objects in a schema on a privileged caller's search_path must not
//! get its objects run by pubjson's functions or by the extension script.
//!
//! - `issue_exploit_does_not_make_a_role_superuser`: the exploit as reported
//!   (a `public.to_jsonb(pg_replication_slots)` that makes its author
//!   superuser when a superuser runs it, then `pubjson.decoding_stats()`).
//! - `planted_lookalikes_are_never_called`: on a cluster of its own, an
//!   ordinary role plants a look-alike in `public` for every pg_catalog
//!   function, aggregate and operator whose name occurs in the bodies of
//!   pubjson's SQL and PL/pgSQL functions (read from pg_proc.prosrc), with
//!   the same argument types (and for to_jsonb, better-matching ones per
//!   catalog row type, as the exploit does). Each look-alike raises a NOTICE
//!   and sets a flag, then returns the real result. The test proves that
//!   they are picked by unqualified calls, then runs every pubjson function,
//!   and DROP/CREATE EXTENSION, as a superuser and as a pg_monitor member
//!   with `search_path = public, pg_catalog`, on the primary and on a
//!   standby (where standby_conflicts takes its other branch): nothing
//!   planted may run.
//! - `pre_existing_schema_in_other_hands_is_refused`: CREATE EXTENSION
//!   refuses a schema pubjson owned by, or open to CREATE by, an ordinary
//!   role.
//! - `issue23_planted_functions_in_the_schema_are_refused`: the install
//!   exploit of issue 23 (look-alikes planted in a squatted schema pubjson,
//!   then the schema handed to a superuser as the old hint said) stops
//!   CREATE EXTENSION; so does what a role that had CREATE and lost it
//!   planted, which also outlives DROP EXTENSION.
//! - `planted_objects_of_every_kind_are_refused`: tables, views, sequences,
//!   types, domains, operators, casts, collations, text search
//!   configurations, statistics objects and aggregates in schema pubjson.
//! - `string_literal_calls_pick_the_extension_function`: an unqualified
//!   `publication_risks('p')` with pubjson first on the path resolves to
//!   the extension's function, not to a look-alike further on the path.
//! - `functions_need_the_monitoring_roles`: permission denied (42501) for
//!   ordinary roles on every function; pg_read_all_stats members read the
//!   statistics, pg_monitor members everything but reset_stats.

use postgres::Client;
use pubjson_e2e::conflicts::{connect_main, fresh_db, main_cluster};
use pubjson_e2e::{describe_error, drop_slot, sqlstate, Conn, ExtraCluster, Server, Standby};
use std::collections::{BTreeMap, BTreeSet};

const PRIMARY_PORT: u16 = 54340;
const STANDBY_PORT: u16 = 54341;

/// Every function of the extension, with a call that runs it
/// (`functions_need_the_monitoring_roles` checks that this is all of them).
/// `%PUB%` is replaced by an existing publication.
const CALLS: &[(&str, &str)] = &[
    // DDL capture (docs/ddl.md): _ddl_event runs only as the event
    // trigger, so its call turns capture on, runs DDL (a table created,
    // altered and dropped) and turns it off again.
    (
        "pubjson._ddl_event()",
        "select pubjson.enable_ddl_capture(); \
         create table public.sec_ddl_probe (id int primary key); \
         alter table public.sec_ddl_probe add column v text; \
         drop table public.sec_ddl_probe; \
         select pubjson.disable_ddl_capture()",
    ),
    (
        "pubjson.disable_ddl_capture()",
        "select pubjson.disable_ddl_capture()",
    ),
    (
        "pubjson.enable_ddl_capture()",
        "select pubjson.enable_ddl_capture(); select pubjson.disable_ddl_capture()",
    ),
    // The backfill's, in the order they run (a chunk needs a started
    // backfill), on a table both test databases have; they need the
    // table's privileges (BACKFILL below).
    (
        "pubjson._backfill_start(oid,integer,bigint,boolean,oid)",
        "select pubjson._backfill_start('sec_bf'::pg_catalog.regclass::pg_catalog.oid, 10, 1048576, false, 'sec_bf'::pg_catalog.regclass::pg_catalog.oid)",
    ),
    (
        "pubjson._backfill_chunk(oid,oid,integer,bigint,boolean)",
        "select pubjson._backfill_chunk('sec_bf'::pg_catalog.regclass::pg_catalog.oid, 'sec_bf'::pg_catalog.regclass::pg_catalog.oid, 10, 1048576, true)",
    ),
    (
        "pubjson._backfill_running(oid)",
        "select pubjson._backfill_running('sec_bf'::pg_catalog.regclass::pg_catalog.oid)",
    ),
    (
        "pubjson.backfill(regclass,integer,bigint,boolean)",
        "call pubjson.backfill('sec_bf')",
    ),
    (
        "pubjson.library_version()",
        "select * from pubjson.library_version()",
    ),
    (
        "pubjson._pending_transactions()",
        "select * from pubjson._pending_transactions()",
    ),
    (
        "pubjson._replay_receipt_time()",
        "select pubjson._replay_receipt_time()",
    ),
    (
        "pubjson._standby_replay()",
        "select * from pubjson._standby_replay()",
    ),
    (
        "pubjson._slot_conflicting(jsonb)",
        "select pubjson._slot_conflicting('{\"conflicting\": true, \"restart_lsn\": \"0/1\"}'::pg_catalog.jsonb)",
    ),
    (
        "pubjson._slot_invalidation(jsonb)",
        "select pubjson._slot_invalidation('{\"wal_status\": \"lost\"}'::pg_catalog.jsonb)",
    ),
    (
        "pubjson.decoding_counters()",
        "select * from pubjson.decoding_counters()",
    ),
    (
        "pubjson.decoding_stats()",
        "select * from pubjson.decoding_stats()",
    ),
    (
        "pubjson.pending_transactions()",
        "select * from pubjson.pending_transactions()",
    ),
    (
        "pubjson.publication_risks(text)",
        "select * from pubjson.publication_risks('%PUB%')",
    ),
    (
        "pubjson.reset_stats(text)",
        "select pubjson.reset_stats('sec_no_such_slot')",
    ),
    (
        "pubjson.standby_conflicts()",
        "select * from pubjson.standby_conflicts()",
    ),
    (
        "pubjson.standby_queries_at_risk()",
        "select * from pubjson.standby_queries_at_risk()",
    ),
    (
        "pubjson.subscription_status()",
        "select * from pubjson.subscription_status()",
    ),
    (
        "pubjson.worst_transactions()",
        "select * from pubjson.worst_transactions()",
    ),
];

/// The DDL capture calls: superuser only, and only where DDL runs.
const DDL_CAPTURE: &[&str] = &[
    "pubjson._ddl_event()",
    "pubjson.disable_ddl_capture()",
    "pubjson.enable_ddl_capture()",
];

/// The backfill's functions: executable by every role, but they read the
/// table as the caller (its SELECT and UPDATE privileges), and write, so
/// not on a standby.
const BACKFILL: &[&str] = &[
    "pubjson._backfill_start(oid,integer,bigint,boolean,oid)",
    "pubjson._backfill_chunk(oid,oid,integer,bigint,boolean)",
    "pubjson._backfill_running(oid)",
    "pubjson.backfill(regclass,integer,bigint,boolean)",
];

/// A connection that keeps the notices the server sends it. Its queries
/// use the simple query protocol ([`Conn::simple`]): the client library's
/// own catalog queries use unqualified operators and would trip the
/// look-alikes.
type Session = Conn;

fn session(host: &str, port: u16, db: &str, user: &str) -> Session {
    Server::new(host, port).connect_keeping_notices(db, user)
}

/// Identifiers (lowercased) and operator candidates in a function body.
/// Operator runs are split every way (`=-` holds `=` and `-`), and
/// over-inclusion is harmless: only names pg_catalog has are planted.
fn words_and_operators(src: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    const OP_CHARS: &str = "+-*/<>=~!@#%^&|`?";
    let chars: Vec<char> = src.chars().collect();
    let (mut words, mut ops) = (BTreeSet::new(), BTreeSet::new());
    let mut i = 0;
    while i < chars.len() {
        let start = i;
        if chars[i].is_ascii_alphabetic() || chars[i] == '_' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            words.insert(chars[start..i].iter().collect::<String>().to_lowercase());
        } else if OP_CHARS.contains(chars[i]) {
            while i < chars.len() && OP_CHARS.contains(chars[i]) {
                i += 1;
            }
            for a in start..i {
                for b in a + 1..=i.min(a + 3) {
                    ops.insert(chars[a..b].iter().collect::<String>());
                }
            }
        } else {
            i += 1;
        }
    }
    (words, ops)
}

fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The polymorphic types a look-alike can be proved with by a concrete one.
fn concrete(ty: &str) -> Option<&str> {
    match ty {
        "anyelement" | "anynonarray" | "anycompatible" | "anycompatiblenonarray" => Some("integer"),
        "anyarray" | "anycompatiblearray" => Some("integer[]"),
        t if t.starts_with("any") || t == "record" || t == "internal" || t == "cstring" => None,
        t => Some(t),
    }
}

/// Planted look-alikes: name -> the statements that planted them, and a
/// statement per look-alike that calls it unqualified (when one can).
#[derive(Default)]
struct Plants {
    /// pg_catalog function/aggregate/operator name -> planted signatures.
    planted: BTreeMap<String, Vec<String>>,
    /// (description, unqualified call) for the proof.
    probes: Vec<(String, String)>,
    /// Plants PostgreSQL refused (pseudo-type arguments an SQL function
    /// cannot take, such as "any"): (signature, error).
    refused: Vec<(String, String)>,
}

const NOTE_FUNCTION: &str = r#"
CREATE FUNCTION public.pubjson_plant_note(what pg_catalog.text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RAISE NOTICE 'pubjson plant called: %', what;
    PERFORM pg_catalog.set_config('pubjson_plant.called', what, false);
END
$$;
"#;

/// Plants a look-alike for every pg_catalog function, aggregate and
/// operator named in `words`/`ops`, as `planter`. `catalog` is a superuser
/// session with a clean search_path.
fn plant(
    catalog: &mut Session,
    planter: &mut Session,
    words: &BTreeSet<String>,
    ops: &BTreeSet<String>,
) -> Plants {
    let mut plants = Plants::default();
    planter.exec(NOTE_FUNCTION);
    let words_array: Vec<String> = words.iter().cloned().collect();
    let ops_array: Vec<String> = ops.iter().cloned().collect();

    let mut try_plant = |plants: &mut Plants,
                         name: &str,
                         signature: String,
                         sql: &[String],
                         probe: Option<String>| {
        for (i, stmt) in sql.iter().enumerate() {
            if let Err(e) = planter.client.batch_execute(stmt) {
                // Undo the half-planted pieces (a function without its operator).
                for done in sql[..i].iter() {
                    if let Some(f) = done.strip_prefix("CREATE FUNCTION ") {
                        let head = f.split(" RETURNS").next().unwrap_or(f);
                        let _ = planter
                            .client
                            .batch_execute(&format!("DROP FUNCTION {head}"));
                    }
                }
                plants
                    .refused
                    .push((signature, pubjson_e2e::describe_error(&e)));
                return;
            }
        }
        plants
            .planted
            .entry(name.to_string())
            .or_default()
            .push(signature.clone());
        if let Some(p) = probe {
            plants.probes.push((signature, p));
        }
    };

    // Functions (aggregates below).
    let functions = catalog
        .client
        .query(
            "select p.oid::int8, p.proname::text, p.prokind::text,
                    pg_get_function_arguments(p.oid), pg_get_function_identity_arguments(p.oid),
                    pg_get_function_result(p.oid), p.proretset, p.proallargtypes is not null,
                    p.pronargs::int4, p.provariadic <> 0, p.provolatile::text,
                    array(select format_type(t, null) from unnest(p.proargtypes::oid[]) t)
               from pg_proc p
              where p.pronamespace = 'pg_catalog'::regnamespace and p.proname = any($1)
              order by p.proname, p.oid",
            &[&words_array],
        )
        .expect("pg_catalog functions");
    for row in &functions {
        let (oid, name, kind): (i64, String, String) = (row.get(0), row.get(1), row.get(2));
        let (args, identity, result): (String, String, String) =
            (row.get(3), row.get(4), row.get(5));
        let (retset, out_params, nargs, variadic): (bool, bool, i32, bool) =
            (row.get(6), row.get(7), row.get(8), row.get(9));
        let volatility: String = row.get(10);
        let arg_types: Vec<String> = row.get(11);
        if kind != "f" {
            continue; // aggregates are planted by hand; window functions and procedures cannot be
        }
        let qname = quote_ident(&name);
        let signature = format!("{name}({identity})");
        let call_args: Vec<String> = (1..=nargs)
            .map(|i| {
                if variadic && i == nargs {
                    format!("VARIADIC ${i}")
                } else {
                    format!("${i}")
                }
            })
            .collect();
        let call = format!("pg_catalog.{qname}({})", call_args.join(", "));
        let select = if retset || out_params {
            format!("SELECT * FROM {call}")
        } else {
            format!("SELECT {call}")
        };
        let sql = format!(
            "CREATE FUNCTION public.{qname}({args}) RETURNS {result} LANGUAGE sql \
             SET search_path = pg_catalog, pg_temp AS $plant$ \
             SELECT public.pubjson_plant_note({note}); {select} $plant$",
            note = quote_literal(&format!("function {signature} [{oid}]")),
        );
        // Probe: immutable or stable plants, called with NULLs of their
        // types (polymorphic ones with integer), unqualified.
        let probe = if volatility != "v" {
            arg_types
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    concrete(t).map(|c| {
                        if variadic && i + 1 == arg_types.len() {
                            format!("VARIADIC NULL::{c}")
                        } else {
                            format!("NULL::{c}")
                        }
                    })
                })
                .collect::<Option<Vec<_>>>()
                .map(|a| format!("SELECT {qname}({})", a.join(", ")))
        } else {
            None
        };
        let refused_before = plants.refused.len();
        try_plant(
            &mut plants,
            &name,
            signature.clone(),
            std::slice::from_ref(&sql),
            probe,
        );
        // No SQL function takes VARIADIC "any" (format, concat_ws,
        // jsonb_build_object...): plant the closest an ordinary role can,
        // VARIADIC text[], which all-text calls could resolve to.
        if plants.refused.len() > refused_before && args.ends_with("VARIADIC \"any\"") {
            let text_args = args.replace("VARIADIC \"any\"", "VARIADIC pg_catalog.text[]");
            let text_signature = format!("{name}({}) for {signature}", text_args);
            let sql = sql.replacen(&format!("({args})"), &format!("({text_args})"), 1);
            let probe_args: Vec<String> = arg_types
                .iter()
                .map(|t| {
                    if t == "\"any\"" {
                        // Two: jsonb_build_object wants key/value pairs.
                        "'k'::pg_catalog.text, 'v'::pg_catalog.text".to_string()
                    } else {
                        format!("NULL::{t}")
                    }
                })
                .collect();
            let probe = format!("SELECT {qname}({})", probe_args.join(", "));
            try_plant(&mut plants, &name, text_signature, &[sql], Some(probe));
        }
    }

    // to_jsonb with a better-matching argument type than anyelement, per
    // catalog row type named in the bodies: the issue's exploit, for every
    // view or table the functions turn into jsonb.
    let relations = catalog
        .client
        .query(
            "select c.relname::text from pg_class c
              where c.relnamespace = 'pg_catalog'::regnamespace and c.relkind in ('r', 'v')
                and c.relname = any($1) order by 1",
            &[&words_array],
        )
        .expect("pg_catalog relations");
    if words.contains("to_jsonb") {
        for row in &relations {
            let rel: String = row.get(0);
            let signature = format!("to_jsonb(pg_catalog.{rel})");
            let sql = format!(
                "CREATE FUNCTION public.to_jsonb(r pg_catalog.{rel}) RETURNS pg_catalog.jsonb LANGUAGE sql \
                 SET search_path = pg_catalog, pg_temp AS $plant$ \
                 SELECT public.pubjson_plant_note({note}); SELECT pg_catalog.to_jsonb(r) $plant$",
                note = quote_literal(&format!("function {signature}")),
            );
            let probe = format!("SELECT to_jsonb(NULL::pg_catalog.{rel})");
            try_plant(&mut plants, "to_jsonb", signature, &[sql], Some(probe));
        }
    }

    // Aggregates: their transition states are mostly `internal`, so each
    // is planted by hand, with a transition function that notes the call.
    let aggregates: &[(&str, &str, [&str; 2], &str)] = &[
        (
            "count",
            "*",
            [
                "pubjson_plant_count(n pg_catalog.int8) RETURNS pg_catalog.int8",
                "SELECT n OPERATOR(pg_catalog.+) 1",
            ],
            "STYPE = pg_catalog.int8, INITCOND = '0'",
        ),
        (
            "string_agg",
            "pg_catalog.text, pg_catalog.text",
            [
                "pubjson_plant_string_agg(s pg_catalog.text, v pg_catalog.text, d pg_catalog.text) RETURNS pg_catalog.text",
                "SELECT CASE WHEN v IS NULL THEN s WHEN s IS NULL THEN v \
                 ELSE s OPERATOR(pg_catalog.||) d OPERATOR(pg_catalog.||) v END",
            ],
            "STYPE = pg_catalog.text",
        ),
        (
            "array_agg",
            "anynonarray",
            [
                "pubjson_plant_array_agg(s anyarray, v anynonarray) RETURNS anyarray",
                "SELECT pg_catalog.array_append(s, v)",
            ],
            "STYPE = anyarray",
        ),
        (
            "jsonb_agg",
            "anyelement",
            [
                "pubjson_plant_jsonb_agg(s pg_catalog.jsonb, v anyelement) RETURNS pg_catalog.jsonb",
                "SELECT COALESCE(s, '[]'::pg_catalog.jsonb) OPERATOR(pg_catalog.||) \
                 pg_catalog.jsonb_build_array(v)",
            ],
            "STYPE = pg_catalog.jsonb",
        ),
        (
            "json_agg",
            "anyelement",
            [
                "pubjson_plant_json_agg(s pg_catalog.jsonb, v anyelement) RETURNS pg_catalog.jsonb",
                "SELECT COALESCE(s, '[]'::pg_catalog.jsonb) OPERATOR(pg_catalog.||) \
                 pg_catalog.jsonb_build_array(v)",
            ],
            "STYPE = pg_catalog.jsonb",
        ),
    ];
    let mut hand_planted_aggregates = BTreeSet::new();
    for (name, args, [sfunc_head, sfunc_body], state) in aggregates {
        if !words.contains(*name) {
            continue;
        }
        hand_planted_aggregates.insert(name.to_string());
        let signature = format!("aggregate {name}({args})");
        let sfunc_name = sfunc_head.split('(').next().unwrap_or_default();
        let sql = [
            format!(
                "CREATE FUNCTION public.{sfunc_head} LANGUAGE sql \
                 SET search_path = pg_catalog, pg_temp AS $plant$ \
                 SELECT public.pubjson_plant_note({note}); {sfunc_body} $plant$",
                note = quote_literal(&signature),
            ),
            format!(
                "CREATE AGGREGATE public.{name}({args}) (SFUNC = public.{sfunc_name}, {state})"
            ),
        ];
        let probe_args = match *args {
            "*" => "*",
            "anynonarray" | "anyelement" => "x",
            _ => "x::pg_catalog.text, ','",
        };
        let probe = format!("SELECT {name}({probe_args}) FROM (VALUES (1), (2)) v(x)");
        try_plant(&mut plants, name, signature, &sql, Some(probe));
    }
    // The other aggregates, generically where the transition state is not
    // `internal`: a transition function that notes the call and calls the
    // real one, the real final function.
    let generic = catalog
        .client
        .query(
            "select p.oid::int8, p.proname::text, pg_get_function_identity_arguments(p.oid),
                    array(select format_type(t, null) from unnest(p.proargtypes::oid[]) t),
                    format_type(a.aggtranstype, null), tf.proname::text, tf.proisstrict,
                    ff.proname::text, a.aggfinalextra, a.agginitval
               from pg_proc p
               join pg_aggregate a on a.aggfnoid = p.oid
               join pg_proc tf on tf.oid = a.aggtransfn
               left join pg_proc ff on ff.oid = a.aggfinalfn
              where p.pronamespace = 'pg_catalog'::regnamespace and p.proname = any($1)
                and a.aggkind = 'n' and a.aggtranstype <> 'internal'::regtype
                and format_type(a.aggtranstype, null) not like 'any%'
                and p.proname <> all($2)
              order by p.proname, p.oid",
            &[
                &words_array,
                &hand_planted_aggregates.iter().cloned().collect::<Vec<_>>(),
            ],
        )
        .expect("pg_catalog aggregates");
    for row in &generic {
        let (oid, name, identity): (i64, String, String) = (row.get(0), row.get(1), row.get(2));
        let arg_types: Vec<String> = row.get(3);
        let (state, transfn, strict): (String, String, bool) = (row.get(4), row.get(5), row.get(6));
        let (finalfn, final_extra, initval): (Option<String>, bool, Option<String>) =
            (row.get(7), row.get(8), row.get(9));
        let signature = format!("aggregate {name}({identity})");
        let sfunc = format!("public.pubjson_plant_agg_{oid}");
        let params: Vec<String> = arg_types
            .iter()
            .enumerate()
            .map(|(i, t)| format!("a{i} {t}"))
            .collect();
        let args: Vec<String> = (0..arg_types.len()).map(|i| format!("a{i}")).collect();
        let mut options = format!("SFUNC = {sfunc}, STYPE = {state}");
        if let Some(f) = finalfn {
            options.push_str(&format!(", FINALFUNC = pg_catalog.{}", quote_ident(&f)));
            if final_extra {
                options.push_str(", FINALFUNC_EXTRA");
            }
        }
        if let Some(init) = initval {
            options.push_str(&format!(", INITCOND = {}", quote_literal(&init)));
        }
        let sql = [
            format!(
                "CREATE FUNCTION {sfunc}(s {state}, {params}) RETURNS {state} LANGUAGE sql {strict} \
                 SET search_path = pg_catalog, pg_temp AS $plant$ \
                 SELECT public.pubjson_plant_note({note}); SELECT pg_catalog.{transfn}(s, {args}) $plant$",
                params = params.join(", "),
                args = args.join(", "),
                strict = if strict { "STRICT" } else { "" },
                transfn = quote_ident(&transfn),
                note = quote_literal(&signature),
            ),
            format!("CREATE AGGREGATE public.{}({identity}) ({options})", quote_ident(&name)),
        ];
        try_plant(&mut plants, &name, signature, &sql, None);
    }
    let catalog_aggregates: BTreeSet<String> = functions
        .iter()
        .filter(|r| r.get::<_, String>(2) == "a")
        .map(|r| r.get(1))
        .collect();
    let missing: Vec<_> = catalog_aggregates
        .iter()
        .filter(|n| !plants.planted.contains_key(*n))
        .collect();
    assert!(
        missing.is_empty(),
        "aggregates named in pubjson's function bodies without a look-alike: {missing:?} (plant one by hand above)"
    );

    // Operators.
    let operators = catalog
        .client
        .query(
            "select o.oid::int8, o.oprname::text,
                    case when o.oprleft = 0 then null else format_type(o.oprleft, null) end,
                    format_type(o.oprright, null), format_type(o.oprresult, null)
               from pg_operator o
              where o.oprnamespace = 'pg_catalog'::regnamespace and o.oprname = any($1)
              order by o.oprname, o.oid",
            &[&ops_array],
        )
        .expect("pg_catalog operators");
    for row in &operators {
        let (oid, name): (i64, String) = (row.get(0), row.get(1));
        let (left, right, result): (Option<String>, String, String) =
            (row.get(2), row.get(3), row.get(4));
        let signature = format!(
            "operator {name}({}, {right})",
            left.as_deref().unwrap_or("NONE")
        );
        let function = format!("public.pubjson_plant_op_{oid}");
        let (params, expr, decl) = match &left {
            Some(l) => (
                format!("l {l}, r {right}"),
                format!("l OPERATOR(pg_catalog.{name}) r"),
                format!("LEFTARG = {l}, RIGHTARG = {right}"),
            ),
            None => (
                format!("r {right}"),
                format!("OPERATOR(pg_catalog.{name}) r"),
                format!("RIGHTARG = {right}"),
            ),
        };
        let sql = [
            format!(
                "CREATE FUNCTION {function}({params}) RETURNS {result} LANGUAGE sql \
                 SET search_path = pg_catalog, pg_temp AS $plant$ \
                 SELECT public.pubjson_plant_note({note}); SELECT {expr} $plant$",
                note = quote_literal(&signature),
            ),
            format!("CREATE OPERATOR public.{name} ({decl}, FUNCTION = {function})"),
        ];
        let probe = match (left.as_deref().map(concrete), concrete(&right)) {
            (Some(Some(l)), Some(r)) => Some(format!("SELECT NULL::{l} {name} NULL::{r}")),
            (None, Some(r)) => Some(format!("SELECT {name} NULL::{r}")),
            _ => None,
        };
        try_plant(&mut plants, &name, signature, &sql, probe);
    }
    plants
}

/// The NOTICEs and flag the look-alikes left since the last call.
fn plant_trips(s: &mut Session) -> Vec<String> {
    let mut trips: Vec<String> = s
        .take_notices()
        .into_iter()
        .filter(|n| n.contains("pubjson plant called"))
        .collect();
    let flag = s
        .simple("select pg_catalog.current_setting('pubjson_plant.called', true)")
        .expect("read the flag");
    if let Some(Some(v)) = flag.first().and_then(|r| r.first()) {
        if !v.is_empty() {
            trips.push(format!("flag pubjson_plant.called = {v}"));
        }
    }
    let _ = s.simple("select pg_catalog.set_config('pubjson_plant.called', '', false)");
    trips
}

/// Runs every pubjson function in `s` (whose search_path is hostile),
/// returning what failed.
fn run_every_function(s: &mut Session, publication: &str, skip: &[&str]) -> Vec<String> {
    let mut failures = Vec::new();
    for (function, call) in CALLS {
        if skip.contains(function) {
            continue;
        }
        let sql = call.replace("%PUB%", publication);
        if let Err(e) = s.simple(&sql) {
            failures.push(format!("{sql}: {}", pubjson_e2e::describe_error(&e)));
        }
    }
    // The error branch of publication_risks.
    match s.simple("select * from pubjson.publication_risks('sec_no_such_publication')") {
        Err(e) if sqlstate(&e) == "42704" => {}
        other => failures.push(format!(
            "publication_risks(unknown): expected 42704, got {other:?}"
        )),
    }
    failures
}

#[test]
fn planted_lookalikes_are_never_called() {
    let cluster = ExtraCluster::start(&pubjson_e2e::cluster_dir("secplants"), PRIMARY_PORT);
    let host = cluster.socket.clone();
    let mut admin = session(&host, PRIMARY_PORT, "postgres", "postgres");
    for sql in [
        "create database sec",
        "create role sec_planter login",
        "create role sec_monitor login in role pg_monitor",
    ] {
        admin.exec(sql);
    }
    let mut su = session(&host, PRIMARY_PORT, "sec", "postgres");
    // Something for every function to find: a decoded slot (statistics,
    // worst transactions), a publication with risks (no replica identity,
    // a sequence, a wide FULL identity, a row filter), an inactive slot.
    su.exec(
        "create extension pubjson;
         grant create on schema public to sec_planter;
         create table sec_t (id serial, v text);
         create table sec_full (id int primary key, a text, b text);
         create table sec_bf (id int primary key, v text);
         insert into sec_bf select i, 'v' || i from generate_series(1, 25) i;
         alter table sec_full replica identity full;
         create table sec_f (id int primary key, v int, w int);
         create publication sec_pub for table sec_t, sec_full, sec_f where (w > 0);",
    );
    su.exec("select pg_create_logical_replication_slot('sec_slot', 'pubjson')");
    su.exec(
        "insert into sec_t (v) values ('a'), ('b');
         insert into sec_full values (1, 'x', 'y');",
    );
    su.simple("select count(*) from pg_logical_slot_get_changes('sec_slot', null, null)")
        .expect("decode");
    let baseline = su
        .simple("select slot_name from pubjson.decoding_stats()")
        .expect("stats");
    assert_eq!(baseline, vec![vec![Some("sec_slot".to_string())]]);

    // What the functions call: every identifier and operator in their bodies.
    let bodies = su
        .client
        .query(
            "select p.oid::regprocedure::text, p.prosrc from pg_proc p
               join pg_language l on l.oid = p.prolang
              where p.pronamespace = 'pubjson'::regnamespace and l.lanname in ('sql', 'plpgsql')",
            &[],
        )
        .expect("bodies");
    assert!(
        bodies.len() >= 5,
        "SQL/PL/pgSQL functions: {}",
        bodies.len()
    );
    let (mut words, mut ops) = (BTreeSet::new(), BTreeSet::new());
    for b in &bodies {
        let (w, o) = words_and_operators(&b.get::<_, String>(1));
        words.extend(w);
        ops.extend(o);
    }
    let mut planter = session(&host, PRIMARY_PORT, "sec", "sec_planter");
    let plants = plant(&mut su, &mut planter, &words, &ops);
    let planted_count: usize = plants.planted.values().map(Vec::len).sum();
    println!(
        "planted {planted_count} look-alikes for {} names: {:?}\nrefused (pseudo-type arguments): {:#?}",
        plants.planted.len(),
        plants.planted.keys().collect::<Vec<_>>(),
        plants.refused
    );
    for must in [
        "to_jsonb",
        "jsonb_build_object",
        "format",
        "pg_wal_lsn_diff",
        "current_setting",
        "pg_is_in_recovery",
        "pg_size_pretty",
        "count",
        "string_agg",
        "array_agg",
        "=",
        "<>",
        "||",
        "->>",
        "->",
        "<@",
        ">=",
    ] {
        assert!(
            plants.planted.contains_key(must),
            "no look-alike planted for {must}; refused: {:?}",
            plants
                .refused
                .iter()
                .filter(|(s, _)| s.contains(must))
                .collect::<Vec<_>>()
        );
    }
    // Only pseudo-type arguments no SQL function may take are refused.
    for (signature, error) in &plants.refused {
        assert!(
            error.contains("cannot") || error.contains("pseudo-type"),
            "planting {signature} failed: {error}"
        );
    }

    // The look-alikes work: called unqualified with public first on the
    // path, they run (and note it).
    su.exec("set search_path = public, pg_catalog; set client_min_messages = notice");
    let mut unproved = Vec::new();
    for (signature, probe) in &plants.probes {
        // The event trigger functions raise 39P03 outside an event
        // trigger, the real one called by its look-alike too: not provable
        // by a probe (the DDL capture run below still must trip nothing).
        if signature.starts_with("pg_event_trigger_") {
            continue;
        }
        match su.simple(probe) {
            Ok(_) if !plant_trips(&mut su).is_empty() => {}
            Ok(_) => unproved.push(format!("{signature}: {probe}: ran without the look-alike")),
            Err(e) => {
                let _ = plant_trips(&mut su);
                unproved.push(format!(
                    "{signature}: {probe}: {}",
                    pubjson_e2e::describe_error(&e)
                ))
            }
        }
    }
    println!(
        "{} of {} probes called their look-alike; not shown: {unproved:#?}",
        plants.probes.len() - unproved.len(),
        plants.probes.len()
    );
    assert!(
        unproved.is_empty(),
        "look-alikes not shown to work: {unproved:#?}"
    );
    let _ = plant_trips(&mut su);

    // The attack: every function, then the extension dropped and created
    // again (twice), every function again; as a superuser and as a
    // pg_monitor member.
    let mut failures = run_every_function(&mut su, "sec_pub", &[]);
    su.exec(
        "drop extension pubjson; create extension pubjson;
         drop extension pubjson; create extension pubjson",
    );
    failures.extend(run_every_function(&mut su, "sec_pub", &[]));
    let trips = plant_trips(&mut su);
    assert!(failures.is_empty(), "functions failed: {failures:#?}");
    assert!(
        trips.is_empty(),
        "planted objects ran as the superuser: {trips:#?}"
    );
    let rows = su
        .simple("select slot_name from pubjson.decoding_stats()")
        .expect("stats");
    assert_eq!(
        rows,
        vec![vec![Some("sec_slot".to_string())]],
        "statistics survive the re-creation"
    );

    let mut monitor = session(&host, PRIMARY_PORT, "sec", "sec_monitor");
    monitor.exec("set search_path = public, pg_catalog; set client_min_messages = notice");
    let skip: Vec<&str> = BACKFILL
        .iter()
        .chain(DDL_CAPTURE)
        .copied()
        .chain(["pubjson.reset_stats(text)"])
        .collect();
    let failures = run_every_function(&mut monitor, "sec_pub", &skip);
    let trips = plant_trips(&mut monitor);
    assert!(
        failures.is_empty(),
        "functions failed for pg_monitor: {failures:#?}"
    );
    assert!(
        trips.is_empty(),
        "planted objects ran as pg_monitor: {trips:#?}"
    );

    // Every SQL and PL/pgSQL function pins its search_path. A procedure
    // that commits cannot (PostgreSQL refuses transaction control under a
    // SET clause): pubjson.backfill qualifies every name instead, which
    // the look-alikes above check; so does the DDL event trigger's, which
    // reads the caller's (src/api/ddl.sql; the DDL run above tripped
    // nothing).
    let unpinned = su
        .simple(
            "select p.oid::pg_catalog.regprocedure from pg_catalog.pg_proc p
               join pg_catalog.pg_language l on l.oid operator(pg_catalog.=) p.prolang
              where p.pronamespace operator(pg_catalog.=) 'pubjson'::pg_catalog.regnamespace
                and l.lanname operator(pg_catalog.=) any ('{sql,plpgsql}'::pg_catalog.name[])
                and not coalesce('search_path=pg_catalog, pg_temp' operator(pg_catalog.=) any (p.proconfig), false)
                and p.oid operator(pg_catalog.<>) 'pubjson.backfill(pg_catalog.regclass, pg_catalog.int4, pg_catalog.int8, pg_catalog.bool)'::pg_catalog.regprocedure
                and p.oid operator(pg_catalog.<>) 'pubjson._ddl_event()'::pg_catalog.regprocedure",
        )
        .expect("proconfig");
    assert!(
        unpinned.is_empty(),
        "functions without a pinned search_path: {unpinned:?}"
    );

    // On a standby, where standby_conflicts() takes its recovery branch.
    let standby = Standby::start_of(
        &Server::new(&host, PRIMARY_PORT),
        &pubjson_e2e::cluster_dir("secstandby"),
        STANDBY_PORT,
    );
    let mut sb = session(&standby.socket, STANDBY_PORT, "sec", "postgres");
    let recovery = sb
        .simple("select pg_catalog.pg_is_in_recovery()")
        .expect("recovery");
    assert_eq!(recovery, vec![vec![Some("t".to_string())]]);
    sb.exec("set search_path = public, pg_catalog; set client_min_messages = notice");
    // A standby runs no DDL and no backfill.
    let skip: Vec<&str> = BACKFILL.iter().chain(DDL_CAPTURE).copied().collect();
    let failures = run_every_function(&mut sb, "sec_pub", &skip);
    let applies = sb
        .simple("select applies from pubjson.standby_conflicts() limit 1")
        .expect("standby_conflicts");
    let trips = plant_trips(&mut sb);
    assert!(
        failures.is_empty(),
        "functions failed on the standby: {failures:#?}"
    );
    assert!(
        trips.is_empty(),
        "planted objects ran on the standby: {trips:#?}"
    );
    assert_eq!(
        applies,
        vec![vec![Some("t".to_string())]],
        "the recovery branch ran"
    );
    drop(standby);

    su.exec("reset search_path");
    drop_slot(&mut su.client, "sec_slot");
    drop(cluster);
}

/// Drops a role (and what it owns in `db`) on the main cluster.
fn drop_role(role: &str, db: &str) {
    let mut c = connect_main(db);
    let _ = c.batch_execute(&format!("drop owned by {role} cascade"));
    let mut p = connect_main("postgres");
    let _ = p.batch_execute(&format!("drop role if exists {role}"));
}

#[test]
fn issue_exploit_does_not_make_a_role_superuser() {
    let (host, port) = main_cluster();
    let _serial = pubjson_e2e::serialize();
    let mut su = fresh_db(&host, port, "sec_exploit", true);
    drop_role("sec_mallory", "postgres");
    for sql in [
        "create role sec_mallory login",
        "grant create on schema public to sec_mallory",
        "create table t (id int primary key)",
        "select pg_create_logical_replication_slot('sec_exploit', 'pubjson')",
        "insert into t values (1)",
        "select count(*) from pg_logical_slot_get_changes('sec_exploit', null, null)",
    ] {
        su.batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    // As reported, plus a NOTICE to show when it runs.
    let mut mallory = session(&host, port, "sec_exploit", "sec_mallory");
    mallory.exec(
        "CREATE FUNCTION public.to_jsonb(r pg_catalog.pg_replication_slots) RETURNS jsonb LANGUAGE plpgsql AS $$
         BEGIN IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user)
         THEN EXECUTE 'ALTER ROLE sec_mallory SUPERUSER'; END IF;
         RAISE NOTICE 'exploit ran as %', current_user;
         RETURN pg_catalog.to_jsonb(r); END $$;",
    );
    // It is picked over pg_catalog.to_jsonb(anyelement) by an unqualified
    // call, pg_catalog first on the path or not (shown as mallory, where it
    // does no harm).
    mallory.exec("select to_jsonb(r) from pg_replication_slots r");
    assert!(
        mallory
            .take_notices()
            .iter()
            .any(|n| n.contains("exploit ran")),
        "the planted to_jsonb is not picked by an unqualified call"
    );

    let mut victim = session(&host, port, "sec_exploit", "postgres");
    victim.exec("set search_path = \"$user\", public");
    let rows = victim
        .simple("SELECT count(*) FROM pubjson.decoding_stats() WHERE slot_name = 'sec_exploit';")
        .expect("decoding_stats");
    let notices = victim.take_notices();
    let superuser = su
        .query_one(
            "select rolsuper from pg_roles where rolname = 'sec_mallory'",
            &[],
        )
        .expect("pg_roles")
        .get::<_, bool>(0);
    drop_slot(&mut su, "sec_exploit");
    drop(victim);
    drop(mallory);
    drop(su);
    drop_role("sec_mallory", "sec_exploit");
    assert!(
        !superuser,
        "sec_mallory became superuser through pubjson.decoding_stats()"
    );
    assert!(notices.is_empty(), "the planted to_jsonb ran: {notices:?}");
    assert_eq!(rows, vec![vec![Some("1".to_string())]]);
}

#[test]
fn pre_existing_schema_in_other_hands_is_refused() {
    let (host, port) = main_cluster();
    let mut su = fresh_db(&host, port, "sec_guard", false);
    drop_role("sec_squatter", "postgres");
    su.batch_execute("create role sec_squatter; create schema pubjson authorization sec_squatter")
        .expect("setup");
    let functions = |c: &mut Client| -> i64 {
        c.query_one(
            "select count(*) from pg_proc where pronamespace = (select oid from pg_namespace where nspname = 'pubjson')",
            &[],
        )
        .expect("count functions")
        .get(0)
    };
    let e = su
        .batch_execute("create extension pubjson")
        .expect_err("a schema owned by an ordinary role is refused");
    assert_eq!(sqlstate(&e), "42501", "{e:?}");
    assert!(
        pubjson_e2e::describe_error(&e).contains("owned by role \"sec_squatter\""),
        "{}",
        pubjson_e2e::describe_error(&e)
    );
    assert_eq!(
        functions(&mut su),
        0,
        "nothing was created in the squatted schema"
    );

    su.batch_execute(
        "drop schema pubjson; create schema pubjson; grant create on schema pubjson to public",
    )
    .expect("open schema");
    let e = su
        .batch_execute("create extension pubjson")
        .expect_err("a schema open to CREATE is refused");
    assert_eq!(sqlstate(&e), "42501", "{e:?}");
    assert!(pubjson_e2e::describe_error(&e).contains("PUBLIC"), "{e:?}");

    // A superuser's schema without CREATE for others is used.
    su.batch_execute("revoke create on schema pubjson from public; create extension pubjson")
        .expect("a superuser's schema is accepted");
    assert!(functions(&mut su) >= 8);
    // The extension lives in schema pubjson whatever the caller's path.
    let schema: String = su
        .query_one(
            "select n.nspname::text from pg_extension e join pg_namespace n on n.oid = e.extnamespace where e.extname = 'pubjson'",
            &[],
        )
        .expect("extnamespace")
        .get(0);
    assert_eq!(schema, "pubjson");
    su.batch_execute("drop extension pubjson")
        .expect("drop extension");
    let e = su
        .batch_execute("create extension pubjson schema public")
        .expect_err("another schema is refused");
    assert_eq!(sqlstate(&e), "0A000", "{e:?}");
    // DROP EXTENSION left the schema (CREATE EXTENSION made it, not the
    // script); created again when missing, under a hostile path too.
    assert_eq!(functions(&mut su), 0);
    su.batch_execute("drop schema pubjson")
        .expect("the empty schema is left behind");
    su.batch_execute(
        "set search_path = public, pg_catalog; create extension pubjson; reset search_path",
    )
    .expect("create extension creates the schema");
    assert!(functions(&mut su) >= 8);
    drop(su);
    drop_role("sec_squatter", "sec_guard");
}

#[test]
fn functions_need_the_monitoring_roles() {
    let (host, port) = main_cluster();
    let mut su = fresh_db(&host, port, "sec_perms", true);
    for r in ["sec_nobody", "sec_usage", "sec_stats", "sec_monitor_main"] {
        drop_role(r, "postgres");
    }
    su.batch_execute(
        "create table t (id int primary key);
         create table sec_bf (id int primary key);
         create publication sec_perms_pub for table t;
         create role sec_nobody;
         create role sec_usage; grant usage on schema pubjson to sec_usage;
         create role sec_stats in role pg_read_all_stats;
         create role sec_monitor_main in role pg_monitor;",
    )
    .expect("setup");

    // CALLS names every function of the extension.
    let catalog: BTreeSet<String> = su
        .query(
            "select p.oid::regprocedure::text from pg_proc p where p.pronamespace = 'pubjson'::regnamespace",
            &[],
        )
        .expect("functions")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let listed: BTreeSet<String> = CALLS.iter().map(|(f, _)| f.to_string()).collect();
    assert_eq!(
        catalog, listed,
        "CALLS must list every function of the extension"
    );

    let stats_functions = [
        "pubjson._pending_transactions()",
        "pubjson._slot_conflicting(jsonb)",
        "pubjson._slot_invalidation(jsonb)",
        "pubjson.decoding_counters()",
        "pubjson.decoding_stats()",
        "pubjson.library_version()",
        "pubjson.pending_transactions()",
        "pubjson.worst_transactions()",
    ];
    let mut wrong = Vec::new();
    for role in [
        "sec_nobody",
        "sec_usage",
        "sec_stats",
        "sec_monitor_main",
        "postgres",
    ] {
        for (function, call) in CALLS {
            let allowed = match role {
                "postgres" => true,
                // Superusers only, whatever EXECUTE says.
                _ if function.contains("ddl_") => false,
                "sec_stats" => stats_functions.contains(function),
                // Only the table's owner may read it.
                _ if BACKFILL.contains(function) => false,
                "sec_monitor_main" => *function != "pubjson.reset_stats(text)",
                _ => false,
            };
            su.batch_execute(&format!("set role {role}"))
                .expect("set role");
            let result = su.batch_execute(&call.replace("%PUB%", "sec_perms_pub"));
            su.batch_execute("reset role").expect("reset role");
            match (allowed, result) {
                (true, Ok(())) => {}
                (false, Err(e)) if sqlstate(&e) == "42501" => {}
                (allowed, result) => wrong.push(format!(
                    "{role} {function}: expected {}, got {:?}",
                    if allowed { "success" } else { "42501" },
                    result.map_err(|e| pubjson_e2e::describe_error(&e))
                )),
            }
        }
    }
    drop(su);
    for r in ["sec_nobody", "sec_usage", "sec_stats", "sec_monitor_main"] {
        drop_role(r, "sec_perms");
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Whether `role` is a superuser now.
fn is_superuser(c: &mut Client, role: &str) -> bool {
    c.query_one("select rolsuper from pg_roles where rolname = $1", &[&role])
        .expect("pg_roles")
        .get(0)
}

/// The functions of schema pubjson, as regprocedure text.
fn schema_functions(c: &mut Client) -> Vec<String> {
    c.query(
        "select p.oid::regprocedure::text from pg_proc p join pg_namespace n on n.oid = p.pronamespace \
          where n.nspname = 'pubjson' order by 1",
        &[],
    )
    .expect("functions of schema pubjson")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// The error of `sql`, which must fail with the schema guard's refusal of
/// objects that are not the extension's: SQLSTATE 42501, every one of
/// `named` in the DETAIL, and a HINT that says to drop them (never to
/// change the owner or the grants of the schema found).
fn expect_content_refusal(c: &mut Client, sql: &str, named: &[&str]) -> String {
    let e = c
        .batch_execute(sql)
        .expect_err("a schema holding foreign objects must be refused");
    let db = e
        .as_db_error()
        .unwrap_or_else(|| panic!("{sql}: not a server error: {e}"));
    let text = format!(
        "{} | DETAIL: {} | HINT: {}",
        db.message(),
        db.detail().unwrap_or(""),
        db.hint().unwrap_or("")
    );
    assert_eq!(db.code().code(), "42501", "{sql}: {text}");
    assert!(
        db.message()
            .contains("holds objects that are not part of extension"),
        "{sql}: {text}"
    );
    for what in named {
        assert!(
            db.detail().unwrap_or("").contains(what),
            "{sql}: {what:?} not named: {text}"
        );
    }
    let hint = db.hint().unwrap_or("");
    assert!(
        hint.contains("drop") && !hint.contains("OWNER") && !hint.contains("REVOKE"),
        "{sql}: the hint must not lead to keeping the schema as it is: {text}"
    );
    text
}

const PLANT_RISKS: &str = "CREATE FUNCTION pubjson.publication_risks(publication text)
  RETURNS TABLE(schema_name name, table_name name, risk text, detail text, hint text)
  LANGUAGE plpgsql AS $$BEGIN EXECUTE 'ALTER ROLE sec_attacker SUPERUSER'; RETURN; END$$";
const PLANT_STATUS: &str = "CREATE FUNCTION pubjson.subscription_status(x int DEFAULT 0)
  RETURNS int LANGUAGE plpgsql AS $$BEGIN EXECUTE 'ALTER ROLE sec_attacker SUPERUSER'; RETURN 0; END$$";
const PLANT_STATS: &str =
    "CREATE FUNCTION pubjson.decoding_stats(x int DEFAULT 0) RETURNS int LANGUAGE sql AS 'SELECT 1'";
const PLANTED: &[&str] = &[
    "function pubjson.publication_risks(pg_catalog.text)",
    "function pubjson.decoding_stats(integer)",
];

#[test]
fn issue23_planted_functions_in_the_schema_are_refused() {
    let (host, port) = main_cluster();
    let mut su = fresh_db(&host, port, "sec_issue23", false);
    drop_role("sec_attacker", "postgres");
    exec_all(
        &mut su,
        &[
            "create role sec_attacker",
            "grant create on database sec_issue23 to sec_attacker",
            "create table t (id int primary key)",
            "create publication mypub for table t",
        ],
    );

    // The install exploit as reported: the attacker squats the schema and
    // plants two look-alikes; the superuser follows the old hint.
    exec_all(
        &mut su,
        &[
            "set role sec_attacker",
            "CREATE SCHEMA pubjson",
            PLANT_RISKS,
            PLANT_STATS,
            "reset role",
        ],
    );
    let e = su
        .batch_execute("create extension pubjson")
        .expect_err("a schema owned by the attacker is refused");
    let db = e.as_db_error().expect("server error");
    assert_eq!(db.code().code(), "42501", "{}", describe_error(&e));
    let hint = db.hint().unwrap_or("").to_string();
    assert!(
        !hint.contains("OWNER TO") && hint.contains("drop or rename it"),
        "the owner hint must not suggest taking the schema over: {hint}"
    );
    su.batch_execute("alter schema pubjson owner to postgres")
        .expect("alter schema owner");
    expect_content_refusal(&mut su, "create extension pubjson", PLANTED);
    let extensions: i64 = su
        .query_one(
            "select count(*) from pg_extension where extname = 'pubjson'",
            &[],
        )
        .expect("pg_extension")
        .get(0);
    assert_eq!(extensions, 0, "CREATE EXTENSION rolled back");
    assert!(
        !is_superuser(&mut su, "sec_attacker"),
        "sec_attacker became superuser"
    );

    // As the new hint says: the schema goes, CREATE EXTENSION makes its own.
    su.batch_execute("drop schema pubjson cascade; create extension pubjson")
        .expect("create extension after dropping the squatted schema");
    su.batch_execute("select * from pubjson.publication_risks('mypub')")
        .expect("publication_risks");
    su.batch_execute("select * from pubjson.decoding_stats()")
        .expect("decoding_stats is not ambiguous");
    assert!(!is_superuser(&mut su, "sec_attacker"));

    // A role that had CREATE and lost it: what it planted stays, and the
    // DROP EXTENSION + CREATE EXTENSION cycle refuses it. (The extension's
    // publication_risks(text) is in the way now; overloads with a default
    // make the extension's calls ambiguous or pick the planted one.)
    exec_all(
        &mut su,
        &[
            "grant create on schema pubjson to sec_attacker",
            "set role sec_attacker",
            PLANT_STATUS,
            PLANT_STATS,
            "reset role",
        ],
    );
    let e = su
        .batch_execute("drop extension pubjson; create extension pubjson")
        .expect_err("a schema open to CREATE is refused");
    assert_eq!(sqlstate(&e), "42501", "{}", describe_error(&e));
    assert!(describe_error(&e).contains("sec_attacker"), "{e:?}");
    su.batch_execute("revoke create on schema pubjson from sec_attacker")
        .expect("revoke");
    // DROP EXTENSION leaves the schema (CREATE EXTENSION made it, not the
    // script), and with it what the attacker planted.
    su.batch_execute("drop extension pubjson")
        .expect("drop extension");
    assert_eq!(
        schema_functions(&mut su),
        vec![
            "pubjson.decoding_stats(integer)".to_string(),
            "pubjson.subscription_status(integer)".to_string()
        ]
    );
    expect_content_refusal(
        &mut su,
        "create extension pubjson",
        &[
            "function pubjson.decoding_stats(integer)",
            "function pubjson.subscription_status(integer)",
        ],
    );
    assert_eq!(schema_functions(&mut su).len(), 2, "nothing was created");
    assert!(!is_superuser(&mut su, "sec_attacker"));
    drop(su);
    drop_role("sec_attacker", "sec_issue23");
}

#[test]
fn planted_objects_of_every_kind_are_refused() {
    let (host, port) = main_cluster();
    let mut su = fresh_db(&host, port, "sec_kinds", false);
    drop_role("sec_planter", "postgres");
    exec_all(
        &mut su,
        &[
            "create role sec_planter",
            "create table public.wide (a int, b int)",
            "alter table public.wide owner to sec_planter",
            "grant create on schema public to sec_planter",
        ],
    );
    // (what sec_planter creates in schema pubjson, what the DETAIL names)
    let kinds: &[(&str, &[&str])] = &[
        ("create table pubjson.t (a int)", &["table pubjson.t"]),
        (
            "create view pubjson.v as select 1 as one",
            &["view pubjson.v"],
        ),
        ("create sequence pubjson.s", &["sequence pubjson.s"]),
        (
            "create type pubjson.mood as enum ('ok')",
            &["type pubjson.mood"],
        ),
        (
            "create type pubjson.pair as (a int, b int)",
            &["type pubjson.pair"],
        ),
        (
            "create domain pubjson.posint as int check (value > 0)",
            &["type pubjson.posint"],
        ),
        (
            "create operator pubjson.=== (leftarg = int, rightarg = int, function = pg_catalog.int4eq)",
            &["operator pubjson.===(integer,integer)"],
        ),
        (
            "create type pubjson.mood as enum ('ok'); \
             create function public.mood_text(pubjson.mood) returns text language sql as 'select ''ok'''; \
             create cast (pubjson.mood as text) with function public.mood_text(pubjson.mood)",
            &["type pubjson.mood", "cast (pubjson.mood AS pg_catalog.text)"],
        ),
        (
            "create collation pubjson.c (locale = 'C')",
            &["collation pubjson.c"],
        ),
        (
            "create text search configuration pubjson.cfg (copy = pg_catalog.simple)",
            &["text search configuration pubjson.cfg"],
        ),
        (
            "create statistics pubjson.st on a, b from public.wide",
            &["statistics object pubjson.st"],
        ),
        (
            "create aggregate pubjson.total(int) (sfunc = pg_catalog.int4pl, stype = int)",
            &["aggregate pubjson.total(integer)"],
        ),
    ];
    let mut wrong = Vec::new();
    for (plant, named) in kinds {
        // A role that had CREATE on a superuser's schema and lost it.
        su.batch_execute(&format!(
            "drop schema if exists pubjson cascade; drop function if exists public.mood_text; \
             create schema pubjson; grant create, usage on schema pubjson to sec_planter; \
             set role sec_planter; {plant}; reset role; \
             revoke create on schema pubjson from sec_planter"
        ))
        .unwrap_or_else(|e| panic!("{plant}: {}", describe_error(&e)));
        match su.batch_execute("create extension pubjson") {
            Ok(()) => {
                wrong.push(format!("{plant}: accepted"));
                su.batch_execute("drop extension pubjson")
                    .expect("drop extension");
            }
            Err(e) => {
                let db = e.as_db_error().expect("server error");
                let detail = db.detail().unwrap_or("");
                if db.code().code() != "42501"
                    || !named.iter().all(|n| detail.contains(n))
                    || db.hint().is_none_or(|h| h.contains("OWNER"))
                {
                    wrong.push(format!("{plant}: {} {detail:?}", describe_error(&e)));
                }
            }
        }
    }
    // The empty schema the planter once had CREATE on is accepted.
    su.batch_execute(
        "drop schema pubjson cascade; create schema pubjson; \
         grant create on schema pubjson to sec_planter; \
         revoke create on schema pubjson from sec_planter; create extension pubjson",
    )
    .expect("an empty superuser's schema is accepted");
    drop(su);
    drop_role("sec_planter", "sec_kinds");
    assert!(wrong.is_empty(), "not refused as expected: {wrong:#?}");
}

#[test]
fn string_literal_calls_pick_the_extension_function() {
    let (host, port) = main_cluster();
    let mut su = fresh_db(&host, port, "sec_overload", true);
    drop_role("sec_overloader", "postgres");
    let planted = |ty: &str| {
        format!(
            "CREATE FUNCTION public.publication_risks(publication {ty})
               RETURNS TABLE(schema_name name, table_name name, risk text, detail text, hint text)
               LANGUAGE plpgsql AS $$BEGIN EXECUTE 'ALTER ROLE sec_overloader SUPERUSER';
               RAISE EXCEPTION 'planted publication_risks({ty}) ran'; END$$"
        )
    };
    exec_all(
        &mut su,
        &[
            "create role sec_overloader",
            "grant create on schema public to sec_overloader",
            "create table t (id int primary key)",
            "create publication mypub for table t",
            "set role sec_overloader",
            &planted("text"),
            &planted("varchar"),
            &planted("name"),
            "reset role",
        ],
    );
    for path in ["pubjson, public", "\"$user\", pubjson, public"] {
        su.batch_execute(&format!(
            "set search_path = {path}; select * from publication_risks('mypub'); reset search_path"
        ))
        .unwrap_or_else(|e| panic!("search_path {path}: {}", describe_error(&e)));
    }
    su.batch_execute("select * from pubjson.publication_risks('mypub')")
        .expect("qualified call");
    assert!(!is_superuser(&mut su, "sec_overloader"));
    drop(su);
    drop_role("sec_overloader", "sec_overload");
}

fn exec_all(c: &mut Client, statements: &[&str]) {
    for sql in statements {
        c.batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {}", describe_error(&e)));
    }
}
