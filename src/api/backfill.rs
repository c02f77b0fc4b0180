//! The backfill's C functions: `pubjson._backfill_start()` and
//! `pubjson._backfill_chunk()`, which the procedure `pubjson.backfill()`
//! (backfill.sql) calls, committing after each. docs/backfill.md is the
//! user's description; `src/backfill.rs` the message they write.
//!
//! Rows are read as the caller, with the caller's privileges (SELECT, and
//! UPDATE on a column for `FOR SHARE`), in key order, `FOR SHARE`: a writer
//! of a row the chunk reads waits for the chunk's commit, and the chunk
//! waits for writers in progress, so the chunk's commit, where its message
//! is decoded, is a point of the stream at which its rows are current.
//! Where a chunk ends, and so where the next one starts, never depends on
//! a row a concurrent writer changed: see [`read_chunk`].
//! Progress is kept in `pubjson.backfill_progress`, which only the
//! extension's owner may write: these functions switch to the owner for
//! those statements only, so the progress row of a chunk's transaction (and
//! the digest of its message in it) can only come from here.

use std::ffi::CStr;

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::{pg_sys, PgSqlErrorCode};

use crate::pg::error::Report;
use crate::pg::settings::{without_jit, Settings, NO_JIT};
use crate::pg::{catalog, session, spi};
use pubjson_core::protocol::backfill::{
    self, ChunkBuilder, SnapshotXids, FIRST, LAST, MAX_MESSAGE,
};

/// Settings a chunk's reads of the table run under, whatever the
/// session's: the last key is kept as text (`backfill_progress.last_key`),
/// written by one chunk and read back by the next, possibly in another
/// session, so every setting that changes the text of a key type (dates
/// and times, intervals, floating point, bytea, money) or how text is read
/// back (the order of day and month) is fixed; and the reads walk the key's
/// index (a sort would detoast every row of the range before the first is
/// locked). Only those queries run under them: the planner settings would
/// make any other query's plan (a catalog look-up's sorts) look costly
/// (issue 42). JIT is off for all of a chunk's queries (`pg::settings`).
const TABLE_READ_SETTINGS: &[(&CStr, &CStr)] = &[
    (c"DateStyle", c"ISO, YMD"),
    (c"IntervalStyle", c"postgres"),
    (c"TimeZone", c"UTC"),
    (c"extra_float_digits", c"3"),
    (c"bytea_output", c"hex"),
    (c"lc_monetary", c"C"),
    (c"enable_sort", c"off"),
    (c"enable_indexscan", c"on"),
];

/// Whether the session that owns progress row `p` is still running the
/// `CALL` that took it over: alive (the same pid and start), active, in
/// the same statement. A cancelled `CALL` leaves its session idle (or in
/// another statement), so another session may resume at once. Without
/// `track_activities` the statement is unknown (`owner_query_start` NULL):
/// then only a session that is gone has stopped.
const OWNER_RUNNING: &str = "EXISTS (SELECT FROM pg_catalog.pg_stat_activity s \
    WHERE s.pid OPERATOR(pg_catalog.=) p.owner_pid \
      AND s.backend_start OPERATOR(pg_catalog.=) p.owner_start \
      AND (p.owner_query_start IS NULL \
           OR (s.state OPERATOR(pg_catalog.=) 'active' \
               AND s.query_start OPERATOR(pg_catalog.=) p.owner_query_start)))";

/// The table's key: its columns (quoted) and their types (qualified as
/// needed), from the primary key or else the replica identity index.
struct Key {
    columns: Vec<String>,
    types: Vec<String>,
}

fn error(code: PgSqlErrorCode, message: String, hint: &str) -> ! {
    Report::new(code, message).hint(hint).error()
}

fn check_sizes(chunk_rows: i32, chunk_bytes: i64) {
    if !(1..=1_000_000).contains(&chunk_rows) {
        error(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("chunk_rows must be between 1 and 1000000, not {chunk_rows}"),
            "",
        );
    }
    if !(1024..=(512 << 20)).contains(&chunk_bytes) {
        error(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("chunk_bytes must be between 1024 and 536870912, not {chunk_bytes}"),
            "",
        );
    }
}

fn oid_arg(oid: pg_sys::Oid) -> DatumWithOid<'static> {
    DatumWithOid::from(oid)
}

/// Refuses a caller who may not read `relation` `FOR SHARE` before anything
/// is recorded about it (the chunk's own SELECT would refuse it later,
/// leaving a started backfill behind).
fn check_readable(relation: pg_sys::Oid) {
    // FOR SHARE needs UPDATE on the table or on one of its columns.
    let readable = Spi::get_one_with_args::<bool>(
        "SELECT pg_catalog.has_table_privilege($1, 'SELECT') \
            AND pg_catalog.has_any_column_privilege($1, 'UPDATE')",
        &[oid_arg(relation)],
    );
    match readable {
        Ok(Some(true)) => {}
        Ok(_) => error(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("permission denied for relation with OID {relation}"),
            "pubjson.backfill() reads the table as its caller: SELECT, and UPDATE on a column (FOR SHARE).",
        ),
        Err(_) => error(
            PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
            format!("relation with OID {relation} does not exist"),
            "",
        ),
    }
    // Row-level security would hide rows from the chunks: the consumer's
    // copy would lack them with nothing said.
    let hidden = Spi::get_one_with_args::<bool>(
        "SELECT pg_catalog.row_security_active($1)",
        &[oid_arg(relation)],
    );
    if matches!(hidden, Ok(Some(true))) {
        error(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("row-level security is active on relation with OID {relation} for this role: a backfill would miss the rows its policies hide"),
            "Backfill as the table's owner (without FORCE ROW LEVEL SECURITY) or as a role with BYPASSRLS.",
        );
    }
}

/// Text of the server's encoding as a Rust string: names are spliced into
/// the chunk's queries, which SPI takes as UTF-8 text (pgrx), so a name
/// that is not valid UTF-8 (a non-ASCII name in a database of another
/// encoding) cannot be read.
fn server_text(bytes: Vec<u8>, what: &str) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| {
        error(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!(
                "pubjson.backfill() cannot read a table whose {what} is not valid UTF-8: {}",
                String::from_utf8_lossy(e.as_bytes())
            ),
            "Rename it with ASCII characters, or run the backfill in a UTF-8 database.",
        )
    })
}

/// The relation's name for messages and its key, or an ERROR naming what
/// is missing. From the syscache: no query to plan.
fn key_of(relation: pg_sys::Oid) -> (String, Key) {
    let Some(summary) = catalog::relation_summary(relation) else {
        error(
            PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
            format!("relation with OID {relation} does not exist"),
            "",
        );
    };
    let name = server_text(catalog::relation_name(relation), "name");
    if summary.kind != b'r' {
        error(
            PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
            format!("\"{name}\" is not a table or partitioned table"),
            "pubjson.backfill() reads tables (a partitioned table partition by partition).",
        );
    }
    if summary.internal {
        error(
            PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
            format!("\"{name}\" is a system catalog or pubjson's own table"),
            "",
        );
    }
    if summary.persistence != b'p' {
        error(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("table \"{name}\" is temporary or unlogged: logical decoding does not see its changes"),
            "",
        );
    }
    // The primary key, else the replica identity index: the order of the
    // chunks and where a resumed backfill goes on.
    let mut key = Key {
        columns: Vec::new(),
        types: Vec::new(),
    };
    for column in catalog::key_columns(relation) {
        key.columns
            .push(server_text(column.name, "key column's name"));
        key.types
            .push(server_text(column.type_name, "key column's type"));
    }
    if key.columns.is_empty() {
        error(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("table \"{name}\" has no primary key and no replica identity index"),
            "pubjson.backfill() reads a table in key order; add a primary key, or set REPLICA IDENTITY USING INDEX.",
        );
    }
    (name, key)
}

/// Runs `f` as the extension's owner (the owner of
/// `pubjson.backfill_progress`), restoring the caller afterwards; an ERROR
/// inside restores it too (transaction abort resets the user id).
fn as_owner<R>(f: impl FnOnce() -> R) -> R {
    let owner = Spi::get_one::<pg_sys::Oid>(
        "SELECT c.relowner FROM pg_catalog.pg_class c \
         WHERE c.oid OPERATOR(pg_catalog.=) 'pubjson.backfill_progress'::pg_catalog.regclass",
    )
    .ok()
    .flatten();
    let Some(owner) = owner else {
        error(
            PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
            "pubjson.backfill_progress is missing".into(),
            "",
        );
    };
    session::as_role(owner, f)
}

/// The relation's row type: with its OID, its identity in
/// `backfill_progress` (a progress row left by a dropped table whose OID a
/// new table reuses does not match it).
fn row_type(relation: pg_sys::Oid) -> pg_sys::Oid {
    catalog::relation_summary(relation).map_or(pg_sys::InvalidOid, |s| s.row_type)
}

fn is_partitioned(relation: pg_sys::Oid) -> bool {
    catalog::relation_summary(relation).is_some_and(|s| s.kind == b'p')
}

fn is_partition_of(relation: pg_sys::Oid, root: pg_sys::Oid) -> bool {
    Spi::get_one_with_args::<bool>(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_partition_tree($2) t \
                        WHERE t.relid OPERATOR(pg_catalog.=) $1::pg_catalog.regclass AND t.isleaf)",
        &[oid_arg(relation), oid_arg(root)],
    )
    .ok()
    .flatten()
    .unwrap_or(false)
}

/// A partitioned table's name for messages; an ERROR for a temporary one
/// (its partitions are too).
fn partitioned_name(relation: pg_sys::Oid) -> String {
    let Some(summary) = catalog::relation_summary(relation) else {
        error(
            PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
            format!("relation with OID {relation} does not exist"),
            "",
        );
    };
    let name = server_text(catalog::relation_name(relation), "name");
    if summary.persistence != b'p' {
        error(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("table \"{name}\" is temporary or unlogged: logical decoding does not see its changes"),
            "",
        );
    }
    name
}

mod sql {
    use super::*;

    /// Takes over the backfill of `relation` for this session: checks the
    /// arguments and the key, refuses while another session runs one,
    /// starts afresh after a finished one (or with `restart`, or when the
    /// progress row is another table's that had the same OID), goes on from
    /// its last key after one that stopped. Its transaction commits before
    /// the first chunk.
    ///
    /// `root` is the relation the backfill was asked for: `relation`
    /// itself, or the partitioned table of which `relation` is a partition.
    /// The partitioned table has a progress row of its own (started with
    /// `relation = root`: its totals, and when it started); a partition's
    /// row belongs to that run of its root (`root`, `root_started`) and
    /// starts afresh in another one. False: the partition was finished in
    /// this run already, nothing to do.
    #[pg_extern(volatile, parallel_unsafe, name = "_backfill_start")]
    #[search_path(pg_catalog, pg_temp)]
    fn backfill_start(
        relation: pg_sys::Oid,
        chunk_rows: i32,
        chunk_bytes: i64,
        restart: bool,
        root: pg_sys::Oid,
    ) -> bool {
        without_jit(|| start(relation, chunk_rows, chunk_bytes, restart, root))
    }

    fn start(
        relation: pg_sys::Oid,
        chunk_rows: i32,
        chunk_bytes: i64,
        restart: bool,
        root: pg_sys::Oid,
    ) -> bool {
        check_sizes(chunk_rows, chunk_bytes);
        check_readable(relation);
        let partitioned = relation == root && is_partitioned(relation);
        let name = if partitioned {
            partitioned_name(relation)
        } else {
            if root != relation && !is_partition_of(relation, root) {
                error(
                    PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                    format!("relation with OID {relation} is not a partition of relation with OID {root}"),
                    "",
                );
            }
            key_of(relation).0
        };
        let reltype = row_type(relation);
        let outcome = as_owner(|| {
            Spi::connect_mut(|client| {
                // A chunk in progress holds its progress row: that backfill
                // is running, and this session must not wait for it.
                let free = client.update(
                    "SELECT FROM pubjson.backfill_progress \
                     WHERE relid OPERATOR(pg_catalog.=) $1 FOR UPDATE SKIP LOCKED",
                    None,
                    &[oid_arg(relation)],
                );
                let present = client.select(
                    "SELECT FROM pubjson.backfill_progress WHERE relid OPERATOR(pg_catalog.=) $1",
                    None,
                    &[oid_arg(relation)],
                );
                if matches!((&free, &present), (Ok(f), Ok(p)) if f.is_empty() && !p.is_empty()) {
                    return Some(false);
                }
                // A partition finished in this run of its root.
                let done = client
                    .select(
                        "SELECT FROM pubjson.backfill_progress p, pubjson.backfill_progress r \
                         WHERE p.relid OPERATOR(pg_catalog.=) $1 AND r.relid OPERATOR(pg_catalog.=) $2 \
                           AND $1 OPERATOR(pg_catalog.<>) $2 \
                           AND p.state OPERATOR(pg_catalog.=) 'finished' \
                           AND p.reltype OPERATOR(pg_catalog.=) $3 \
                           AND p.root OPERATOR(pg_catalog.=) $2 \
                           AND p.root_started OPERATOR(pg_catalog.=) r.started",
                        None,
                        &[oid_arg(relation), oid_arg(root), oid_arg(reltype)],
                    )
                    .is_ok_and(|t| !t.is_empty());
                if done {
                    return None;
                }
                // Afresh: after a finished backfill, on request, when the
                // row is a dropped table's (another row type), or a
                // partition's of another run of its root.
                let fresh = "(p.state OPERATOR(pg_catalog.=) 'finished' OR $4 \
                              OR p.reltype IS DISTINCT FROM EXCLUDED.reltype \
                              OR p.root IS DISTINCT FROM EXCLUDED.root \
                              OR p.root_started IS DISTINCT FROM EXCLUDED.root_started)";
                let row = client.update(
                    &format!(
                        "INSERT INTO pubjson.backfill_progress AS p \
                           (relid, reltype, relation, owner_pid, owner_start, owner_query_start, \
                            root, root_started) \
                         SELECT $1, $3, $2, a.pid, a.backend_start, a.query_start, $5, \
                                (SELECT r.started FROM pubjson.backfill_progress r \
                                 WHERE r.relid OPERATOR(pg_catalog.=) $5 \
                                   AND $5 OPERATOR(pg_catalog.<>) $1) \
                         FROM pg_catalog.pg_stat_activity a \
                         WHERE a.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() \
                         ON CONFLICT (relid) DO UPDATE SET \
                           relation = EXCLUDED.relation, reltype = EXCLUDED.reltype, \
                           owner_pid = EXCLUDED.owner_pid, owner_start = EXCLUDED.owner_start, \
                           owner_query_start = EXCLUDED.owner_query_start, \
                           state = 'running', \
                           chunks = CASE WHEN {fresh} THEN 0 ELSE p.chunks END, \
                           rows = CASE WHEN {fresh} THEN 0 ELSE p.rows END, \
                           last_key = CASE WHEN {fresh} THEN NULL ELSE p.last_key END, \
                           end_key = CASE WHEN {fresh} THEN NULL ELSE p.end_key END, \
                           started = CASE WHEN {fresh} THEN pg_catalog.clock_timestamp() ELSE p.started END, \
                           root = EXCLUDED.root, root_started = EXCLUDED.root_started, \
                           digest = NULL, finished = NULL, updated = pg_catalog.now() \
                         WHERE p.state OPERATOR(pg_catalog.=) 'finished' \
                            OR p.reltype IS DISTINCT FROM EXCLUDED.reltype \
                            OR p.owner_pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() \
                            OR NOT {OWNER_RUNNING} \
                         RETURNING p.relid"
                    ),
                    None,
                    &[
                        oid_arg(relation),
                        DatumWithOid::from(name.as_str()),
                        oid_arg(reltype),
                        DatumWithOid::from(restart),
                        oid_arg(root),
                    ],
                );
                Some(matches!(row, Ok(t) if !t.is_empty()))
            })
        });
        let Some(owner_row) = outcome else {
            return false;
        };
        if !owner_row {
            let pid = as_owner(|| {
                Spi::get_one_with_args::<i32>(
                    "SELECT owner_pid FROM pubjson.backfill_progress WHERE relid OPERATOR(pg_catalog.=) $1",
                    &[oid_arg(relation)],
                )
                .ok()
                .flatten()
            });
            error(
                PgSqlErrorCode::ERRCODE_OBJECT_IN_USE,
                format!(
                    "a backfill of \"{name}\" is running in process {}",
                    pid.unwrap_or_default()
                ),
                "Wait for it to finish, or cancel it (pg_cancel_backend); CALL pubjson.backfill() then resumes where it stopped.",
            );
        }
        true
    }

    /// Whether the backfill of `relation` is running: its session is in
    /// the `CALL` that took it over (the view's `stopped`).
    #[pg_extern(stable, parallel_safe, name = "_backfill_running")]
    #[search_path(pg_catalog, pg_temp)]
    fn backfill_running(relation: pg_sys::Oid) -> bool {
        without_jit(|| running(relation))
    }

    fn running(relation: pg_sys::Oid) -> bool {
        // Only about tables the caller may read (as the view shows them).
        let readable = Spi::get_one_with_args::<bool>(
            "SELECT pg_catalog.has_table_privilege($1, 'SELECT')",
            &[oid_arg(relation)],
        );
        if !matches!(readable, Ok(Some(true))) {
            error(
                PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                format!("permission denied for relation with OID {relation}"),
                "",
            );
        }
        as_owner(|| {
            Spi::get_one_with_args::<bool>(
                &format!(
                    "SELECT {OWNER_RUNNING} FROM pubjson.backfill_progress p \
                     WHERE p.relid OPERATOR(pg_catalog.=) $1 \
                       AND p.state OPERATOR(pg_catalog.=) 'running'"
                ),
                &[oid_arg(relation)],
            )
            .ok()
            .flatten()
            .unwrap_or(false)
        })
    }

    /// Reads and sends the next chunk of `relation` (see the module
    /// comment); true when it was the relation's last. `root` is the
    /// relation the backfill was asked for (`relation`, or the partitioned
    /// table it is a partition of: the markers name it, its progress row
    /// counts the rows of all its partitions); `last_table`: `relation` is
    /// the last table of the backfill (the end marker comes with its last
    /// chunk).
    #[pg_extern(volatile, parallel_unsafe, name = "_backfill_chunk")]
    #[search_path(pg_catalog, pg_temp)]
    fn backfill_chunk(
        relation: pg_sys::Oid,
        root: pg_sys::Oid,
        chunk_rows: i32,
        chunk_bytes: i64,
        last_table: bool,
    ) -> bool {
        check_sizes(chunk_rows, chunk_bytes);
        let internal = Settings::set(NO_JIT);
        check_readable(relation);
        let reltype = row_type(relation);
        // The progress rows (the table's, its root's), locked for the
        // chunk's transaction.
        let progress = |relid: pg_sys::Oid, reltype: pg_sys::Oid| {
            as_owner(|| {
                Spi::connect_mut(|client| {
                    let t = client
                        .update(
                            "SELECT p.chunks, p.rows, p.last_key, \
                                    p.owner_pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid(), \
                                    p.reltype OPERATOR(pg_catalog.=) $2, p.end_key \
                             FROM pubjson.backfill_progress p \
                             WHERE p.relid OPERATOR(pg_catalog.=) $1 AND p.state OPERATOR(pg_catalog.=) 'running' \
                             FOR UPDATE",
                            None,
                            &[oid_arg(relid), oid_arg(reltype)],
                        )
                        .ok()?;
                    let row = t.first();
                    Some((
                        row.get::<i64>(1).ok()??,
                        row.get::<i64>(2).ok()??,
                        row.get::<Vec<String>>(3).ok()?,
                        row.get::<bool>(4).ok()??,
                        row.get::<bool>(5).ok()?.unwrap_or(false),
                        row.get::<Vec<String>>(6).ok()?,
                    ))
                })
            })
        };
        let check = |relid: pg_sys::Oid, reltype: pg_sys::Oid| {
            let Some((chunks, rows, last_key, mine, same_table, end_key)) =
                progress(relid, reltype)
            else {
                error(
                    PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                    format!("no backfill of relation {relid} is running"),
                    "Call pubjson.backfill(), which starts one.",
                );
            };
            if !mine {
                error(
                    PgSqlErrorCode::ERRCODE_OBJECT_IN_USE,
                    format!("the backfill of relation {relid} was taken over by another session"),
                    "",
                );
            }
            if !same_table {
                error(
                    PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                    format!("the backfill's progress of relation {relid} is another table's"),
                    "Call pubjson.backfill(), which starts afresh.",
                );
            }
            (chunks, rows, last_key, end_key)
        };
        let (chunks, rows_done, last_key, end_key) = check(relation, reltype);
        let of_root = (root != relation).then(|| {
            if !is_partition_of(relation, root) {
                error(
                    PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                    format!("relation with OID {relation} is not a partition of relation with OID {root}"),
                    "",
                );
            }
            let (chunks, rows, _, _) = check(root, row_type(root));
            (chunks, rows)
        });

        let (_, key) = key_of(relation);
        let key_query = KeyQuery::new(relation, &key);
        let reading = Settings::set(TABLE_READ_SETTINGS);
        let (chunk, end_key) = Spi::connect_mut(|client| {
            // The run's end, found by its first chunk (kept for the rest).
            let end_key = end_key.unwrap_or_else(|| largest_key(client, &key_query, &key));
            let chunk = read_chunk(
                client,
                &key_query,
                &key,
                last_key.as_deref(),
                &end_key,
                chunk_rows,
                chunk_bytes,
            );
            (chunk, end_key)
        });
        reading.restore();
        let sent = chunk.message.rows() as u64;
        let rows_so_far = rows_done as u64 + sent;
        // The markers' start, and their count: the root's.
        let (first, total) = match of_root {
            Some((root_chunks, root_rows)) => (root_chunks == 0, root_rows as u64 + sent),
            None => (chunks == 0, rows_so_far),
        };
        let last = chunk.exhausted && last_table;
        let flags = if first { FIRST } else { 0 } | if last { LAST } else { 0 };
        let message = chunk
            .message
            .finish(relation.to_u32(), root.to_u32(), flags, total);
        let digest = backfill::digest(&message).to_vec();
        // The progress rows first: the decoder must have seen the digest by
        // the time it decodes the message.
        as_owner(|| {
            Spi::connect_mut(|client| {
                client
                    .update(
                        "UPDATE pubjson.backfill_progress SET \
                           chunks = chunks OPERATOR(pg_catalog.+) 1, rows = $2, \
                           last_key = coalesce($3, last_key), digest = $4, updated = pg_catalog.now(), \
                           state = CASE WHEN $5 THEN 'finished' ELSE 'running' END, \
                           finished = CASE WHEN $5 THEN pg_catalog.now() END, end_key = $6 \
                         WHERE relid OPERATOR(pg_catalog.=) $1",
                        None,
                        &[
                            oid_arg(relation),
                            DatumWithOid::from(rows_so_far as i64),
                            DatumWithOid::from(chunk.boundary),
                            DatumWithOid::from(digest.as_slice()),
                            DatumWithOid::from(chunk.exhausted),
                            DatumWithOid::from(end_key),
                        ],
                    )
                    .map(|_| ())?;
                if of_root.is_some() {
                    client
                        .update(
                            "UPDATE pubjson.backfill_progress SET \
                               chunks = chunks OPERATOR(pg_catalog.+) 1, rows = $2, \
                               updated = pg_catalog.now(), \
                               state = CASE WHEN $3 THEN 'finished' ELSE 'running' END, \
                               finished = CASE WHEN $3 THEN pg_catalog.now() END \
                             WHERE relid OPERATOR(pg_catalog.=) $1",
                            None,
                            &[
                                oid_arg(root),
                                DatumWithOid::from(total as i64),
                                DatumWithOid::from(last),
                            ],
                        )
                        .map(|_| ())?;
                }
                Ok::<(), pgrx::spi::SpiError>(())
            })
        })
        .unwrap_or_else(|e| {
            error(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("could not record the backfill's progress: {e}"),
                "",
            )
        });
        // As the caller: writing logical messages is their privilege. The
        // bytea is built in place (one copy of the message at a time).
        let content = spi::bytea_argument(message);
        Spi::connect_mut(|client| {
            client
                .update(
                    "SELECT pg_catalog.pg_logical_emit_message(true, $1, $2)",
                    None,
                    &[
                        DatumWithOid::from(
                            std::str::from_utf8(backfill::PREFIX).unwrap_or_default(),
                        ),
                        content,
                    ],
                )
                .map(|_| ())
        })
        .unwrap_or_else(|e| {
            error(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("could not write the backfill message: {e}"),
                "",
            )
        });
        internal.restore();
        chunk.exhausted
    }
}

/// What a chunk read: the message, the key it ends at (`None`: where the
/// last one ended) and whether the table has no more rows.
struct ChunkRead {
    message: ChunkBuilder,
    boundary: Option<Vec<String>>,
    exhausted: bool,
}

/// The pieces of a chunk's queries: the table's name, the row's alias,
/// the key columns qualified with it, and those columns as text.
struct KeyQuery {
    table: String,
    alias: &'static str,
    qualified: Vec<String>,
    texts: String,
}

impl KeyQuery {
    fn new(relation: pg_sys::Oid, key: &Key) -> KeyQuery {
        let table = server_text(catalog::relation_name(relation), "name");
        // The row's alias must not be a column's name (a column would
        // win). Key columns are qualified with it everywhere: a bare name
        // in ORDER BY would mean the output column of that name (the key's
        // text).
        let alias = "\"pubjson backfill row\"";
        let qualified: Vec<String> = key.columns.iter().map(|c| format!("{alias}.{c}")).collect();
        let texts: Vec<String> = qualified
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c}::pg_catalog.text AS key{i}"))
            .collect();
        KeyQuery {
            table,
            alias,
            qualified,
            texts: texts.join(", "),
        }
    }
}

/// The largest key of `key_query`'s table now, as text (under the chunk's fixed
/// settings), or no columns at all when the table is empty: where a
/// backfill run ends. Rows inserted beyond it later are in the stream (the
/// slot predates the run), so the run ends however fast the table grows at
/// its end.
fn largest_key(client: &SpiClient<'_>, key_query: &KeyQuery, key: &Key) -> Vec<String> {
    let KeyQuery {
        table,
        alias,
        qualified,
        texts,
    } = key_query;
    let descending: Vec<String> = qualified.iter().map(|c| format!("{c} DESC")).collect();
    let sql = format!(
        "SELECT {texts} FROM ONLY {table} AS {alias} ORDER BY {} LIMIT 1",
        descending.join(", ")
    );
    first_key(client, &sql, &[], key, "end").unwrap_or_default()
}

/// The key texts of the first row `query` returns (its first columns), or
/// `None` when it returns none; `what` names it in the ERROR.
fn first_key(
    client: &SpiClient<'_>,
    query: &str,
    args: &[DatumWithOid],
    key: &Key,
    what: &str,
) -> Option<Vec<String>> {
    client
        .select(query, None, args)
        .unwrap_or_else(|e| {
            error(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("could not read the backfill's {what}: {e}"),
                "",
            )
        })
        .next()
        .map(|row| {
            (0..key.columns.len())
                .map(|i| row.get::<String>(i + 1).ok().flatten().unwrap_or_default())
                .collect()
        })
}

/// The next rows of `key_query`'s table after `after` (the last key's text, `None`
/// for the first chunk), in key order, locked `FOR SHARE`: at most
/// `chunk_rows` of them, ending at the row with which the message reaches
/// `chunk_bytes`.
///
/// Where the chunk ends (the next one's start) is decided by rows as the
/// chunk's snapshot has them, never by a row a concurrent writer changed:
/// under READ COMMITTED, a row the chunk waits for (a writer holds it) is
/// returned in its newest version when the writer commits (PostgreSQL's
/// EvalPlanQual), with its new key, in the place of the old one. So:
///
/// 1. The boundary `K`, the `chunk_rows`-th key after `after`, is read
///    first, without locks.
/// 2. The rows with keys in (`after`, `K`] are read in key order and
///    locked. A row whose key a writer moved is returned only if its new
///    key is still in the range; a row whose version the chunk's snapshot
///    does not see (the writer's) never ends the chunk.
/// 3. The chunk ends after the whole range (`K`; without `K`, fewer than
///    `chunk_rows` rows were left: the end of the table), or earlier at
///    the first row, seen by the snapshot, with which it reaches
///    `chunk_rows` rows or `chunk_bytes` bytes: its key.
///
/// Every row whose key, as the snapshot sees it, is up to the boundary has
/// then been read: locked and sent, or found moved or deleted by a writer
/// that committed. Why no row is lost (docs/backfill.md, Guarantees):
///
/// - A row moved upwards (its new key beyond the boundary) by a writer the
///   chunk waited for is not sent here; a later chunk reads it at its new
///   key, as it reads rows inserted beyond the boundary.
/// - A row the chunk's snapshot does not see (inserted, or moved into the
///   range, by a writer that commits after the snapshot) is in the stream
///   as that writer's `I` or `U`, after the chunk's start; an `I` carries
///   every value.
/// - A row moved downwards, to a key the backfill has passed (at or below
///   the boundary), is never read again: the stream's `U` carries its new
///   values, except TOASTed values the UPDATE did not change (unless
///   `REPLICA IDENTITY FULL`): that exception stays, see the docs.
/// - A row sent here that a later chunk reads again (it moved within the
///   range past the boundary) is sent twice: each `F` is the row's state at
///   its chunk's commit, so applying both is right.
///
/// Rows are fetched a few at a time (as many as the bytes left allow by
/// the largest row so far, at most 100): the rows fetched past the end are
/// locked until the commit but not sent. No message exceeds
/// [`MAX_MESSAGE`]: a row that would make it larger ends the chunk before
/// it, and a single row that large is an ERROR (54000).
fn read_chunk(
    client: &mut SpiClient<'_>,
    key_query: &KeyQuery,
    key: &Key,
    after: Option<&[String]>,
    end: &[String],
    chunk_rows: i32,
    chunk_bytes: i64,
) -> ChunkRead {
    if end.is_empty() {
        // The table was empty when the run's first chunk ran: what it has
        // now came later, through the stream.
        return ChunkRead {
            message: ChunkBuilder::new(),
            boundary: None,
            exhausted: true,
        };
    }
    let KeyQuery {
        table,
        alias,
        qualified,
        texts,
    } = key_query;
    let columns = qualified.join(", ");
    // `key OP (parameters from $first)`, row-wise for a key of several
    // columns.
    let compare = |op: &str, first: usize| -> String {
        let params: Vec<String> = key
            .types
            .iter()
            .enumerate()
            .map(|(i, t)| format!("CAST(${} AS {t})", first + i))
            .collect();
        if qualified.len() == 1 {
            format!("{columns} OPERATOR(pg_catalog.{op}) {}", params[0])
        } else {
            format!(
                "ROW({columns}) OPERATOR(pg_catalog.{op}) ROW({})",
                params.join(", ")
            )
        }
    };
    let key_args = |k: &[String]| -> Vec<DatumWithOid> {
        k.iter().map(|k| DatumWithOid::from(k.as_str())).collect()
    };
    // Parameters: the last key ($1...), if any, then the run's end.
    let mut bound_args = key_args(after.unwrap_or_default());
    let lower = after.map(|_| compare(">", 1));
    let upper = compare("<=", bound_args.len() + 1);
    bound_args.extend(key_args(end));

    // 1. The boundary, unlocked.
    let mut query = format!("SELECT {texts} FROM ONLY {table} AS {alias} WHERE {upper}");
    if let Some(lower) = &lower {
        query += &format!(" AND {lower}");
    }
    query += &format!(" ORDER BY {columns} OFFSET {} LIMIT 1", chunk_rows - 1);
    let boundary = first_key(client, &query, &bound_args, key, "boundary");

    // 2. The range, locked, with each row's xmin and the snapshot: up to
    // the boundary, or without one up to the run's end.
    let mut args = key_args(after.unwrap_or_default());
    let mut conditions: Vec<String> = lower.into_iter().collect();
    conditions.push(compare("<=", args.len() + 1));
    args.extend(key_args(boundary.as_deref().unwrap_or(end)));
    let query = format!(
        "SELECT {alias}, {texts}, {alias}.xmin::pg_catalog.text, \
                (SELECT pg_catalog.pg_current_snapshot()::pg_catalog.text) \
         FROM ONLY {table} AS {alias} WHERE {} ORDER BY {columns} FOR SHARE OF {alias}",
        conditions.join(" AND ")
    );
    let xmin_column = key.columns.len() + 2;
    let mut cursor = client.open_cursor_mut(query.as_str(), &args);
    let mut message = ChunkBuilder::new();
    let mut snapshot: Option<SnapshotXids> = None;
    let mut end: Option<Vec<String>> = None;
    // The largest row so far, with its length word: how many rows the
    // bytes left may hold (one row first, before any is known).
    let mut largest = usize::MAX;
    let mut stopped = false;
    'fetch: loop {
        let left = (chunk_bytes as usize).saturating_sub(message.len());
        let count = (left / largest).clamp(1, 100).min(
            (chunk_rows as usize)
                .saturating_sub(message.rows() as usize)
                .max(1),
        );
        let batch = cursor.fetch(count as i64).unwrap_or_else(|e| {
            error(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("could not read the backfill's rows: {e}"),
                "",
            )
        });
        if batch.is_empty() {
            break;
        }
        for row in batch {
            let Ok(Some(value)) = row.get::<pgrx::AnyElement>(1) else {
                continue;
            };
            // The row's image (the query's first column, of the relation's
            // row type), detoasted, in SPI's memory for the call.
            let fits = spi::with_row_image(&value, |row_bytes| {
                if message.len_with(row_bytes.len()) > MAX_MESSAGE {
                    if message.is_empty() {
                        error(
                            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                            format!(
                                "a row of \"{table}\" is {} bytes detoasted: more than a backfill message can carry ({MAX_MESSAGE} bytes)",
                                row_bytes.len()
                            ),
                            "pubjson.backfill() cannot send this row; the stream carries its later changes.",
                        );
                    }
                    return false;
                }
                largest = if largest == usize::MAX {
                    row_bytes.len() + 4
                } else {
                    largest.max(row_bytes.len() + 4)
                };
                message.push(row_bytes);
                true
            });
            match fits {
                None => continue,
                Some(false) => {
                    stopped = true;
                    break 'fetch;
                }
                Some(true) => {}
            }
            if snapshot.is_none() {
                snapshot = row
                    .get::<String>(xmin_column + 1)
                    .ok()
                    .flatten()
                    .and_then(|text| SnapshotXids::parse(&text));
            }
            let seen = match (&snapshot, row.get::<String>(xmin_column)) {
                (Some(snapshot), Ok(Some(xmin))) => {
                    xmin.parse::<u32>().is_ok_and(|x| snapshot.sees(x))
                }
                _ => false,
            };
            if !seen {
                // A writer's version: its key says nothing of the rows
                // before it in the range.
                continue;
            }
            end = Some(
                (0..key.columns.len())
                    .map(|i| row.get::<String>(i + 2).ok().flatten().unwrap_or_default())
                    .collect(),
            );
            if message.rows() >= chunk_rows as u32 || message.len() >= chunk_bytes as usize {
                stopped = true;
                break 'fetch;
            }
        }
    }
    if stopped {
        // Up to the last row seen by the snapshot (the rows sent after it,
        // if any, are read again by the next chunk).
        ChunkRead {
            message,
            boundary: end,
            exhausted: false,
        }
    } else {
        // The whole range: up to K, or the end of the table.
        ChunkRead {
            message,
            exhausted: boundary.is_none(),
            boundary: boundary.or(end),
        }
    }
}
