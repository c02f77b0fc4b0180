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
//! Progress is kept in `pubjson.backfill_progress`, which only the
//! extension's owner may write: these functions switch to the owner for
//! those statements only, so the progress row of a chunk's transaction (and
//! the digest of its message in it) can only come from here.

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::{pg_sys, PgSqlErrorCode};

use crate::backfill::{self, FIRST, LAST};

/// The table's key: its columns (quoted) and their types (qualified as
/// needed), from the primary key or else the replica identity index.
struct Key {
    columns: Vec<String>,
    types: Vec<String>,
}

fn error(code: PgSqlErrorCode, message: String, hint: &str) -> ! {
    let report = pg_sys::panic::ErrorReport::new(code, message, "pubjson backfill");
    let report = if hint.is_empty() {
        report
    } else {
        report.set_hint(hint)
    };
    report.report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
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

/// Refuses a caller who may not read `relation` before anything is
/// recorded about it (the chunk's own SELECT would refuse it later).
fn check_readable(relation: pg_sys::Oid) {
    let readable = Spi::get_one_with_args::<bool>(
        "SELECT pg_catalog.has_table_privilege($1, 'SELECT')",
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
}

/// The relation's name for messages and its key, or an ERROR naming what
/// is missing.
fn key_of(client: &SpiClient<'_>, relation: pg_sys::Oid) -> (String, Key) {
    let name = client
        .select(
            "SELECT pg_catalog.format('%s', $1::pg_catalog.regclass), \
                    c.relkind::pg_catalog.text, c.relpersistence::pg_catalog.text, \
                    c.relnamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace \
                      OR c.relnamespace OPERATOR(pg_catalog.=) 'pubjson'::pg_catalog.regnamespace \
             FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) $1",
            None,
            &[oid_arg(relation)],
        )
        .ok()
        .and_then(|t| {
            let row = t.first();
            Some((
                row.get::<String>(1).ok()??,
                row.get::<String>(2).ok()??,
                row.get::<String>(3).ok()??,
                row.get::<bool>(4).ok()??,
            ))
        });
    let Some((name, relkind, persistence, internal)) = name else {
        error(
            PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
            format!("relation with OID {relation} does not exist"),
            "",
        );
    };
    if relkind != "r" {
        error(
            PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
            format!("\"{name}\" is not a table or partitioned table"),
            "pubjson.backfill() reads tables (a partitioned table partition by partition).",
        );
    }
    if internal {
        error(
            PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
            format!("\"{name}\" is a system catalog or pubjson's own table"),
            "",
        );
    }
    if persistence != "p" {
        error(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("table \"{name}\" is temporary or unlogged: logical decoding does not see its changes"),
            "",
        );
    }
    // The primary key, else the replica identity index: the order of the
    // chunks and where a resumed backfill goes on.
    let columns = client.select(
        "SELECT pg_catalog.quote_ident(a.attname::pg_catalog.text), \
                pg_catalog.format_type(a.atttypid, NULL) \
         FROM (SELECT i.indkey FROM pg_catalog.pg_index i \
               WHERE i.indrelid OPERATOR(pg_catalog.=) $1 AND (i.indisprimary OR i.indisreplident) \
               ORDER BY i.indisprimary DESC LIMIT 1) k, \
              LATERAL pg_catalog.unnest(k.indkey::pg_catalog.int2[]) WITH ORDINALITY AS u(attnum, n) \
              JOIN pg_catalog.pg_attribute a \
                ON a.attrelid OPERATOR(pg_catalog.=) $1 AND a.attnum OPERATOR(pg_catalog.=) u.attnum \
         ORDER BY u.n",
        None,
        &[oid_arg(relation)],
    );
    let mut key = Key {
        columns: Vec::new(),
        types: Vec::new(),
    };
    if let Ok(rows) = columns {
        for row in rows {
            if let (Ok(Some(column)), Ok(Some(type_name))) =
                (row.get::<String>(1), row.get::<String>(2))
            {
                key.columns.push(column);
                key.types.push(type_name);
            }
        }
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
    let mut caller = pg_sys::InvalidOid;
    let mut context = 0;
    // SAFETY: reads and sets the backend's current user id and security
    // context (plain globals); the owner is a role that exists (it owns a
    // relation). SECURITY_LOCAL_USERID_CHANGE is what SECURITY DEFINER uses.
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut caller, &mut context);
        pg_sys::SetUserIdAndSecContext(
            owner,
            context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
        );
    }
    let result = f();
    // SAFETY: as above, back to what was read.
    unsafe { pg_sys::SetUserIdAndSecContext(caller, context) };
    result
}

mod sql {
    use super::*;

    /// Takes over the backfill of `relation` for this session: checks the
    /// arguments and the key, refuses while another live session runs one,
    /// starts afresh after a finished one, goes on from its last key after
    /// one that stopped. Its transaction commits before the first chunk.
    #[pg_extern(volatile, parallel_unsafe, name = "_backfill_start")]
    #[search_path(pg_catalog, pg_temp)]
    fn backfill_start(relation: pg_sys::Oid, chunk_rows: i32, chunk_bytes: i64) {
        check_sizes(chunk_rows, chunk_bytes);
        check_readable(relation);
        let name = Spi::connect(|client| key_of(client, relation).0);
        let owner_row = as_owner(|| {
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
                    return false;
                }
                let row = client.update(
                    "INSERT INTO pubjson.backfill_progress AS p (relid, relation, owner_pid, owner_start) \
                     SELECT $1, $2, a.pid, a.backend_start FROM pg_catalog.pg_stat_activity a \
                     WHERE a.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() \
                     ON CONFLICT (relid) DO UPDATE SET \
                       relation = EXCLUDED.relation, \
                       owner_pid = EXCLUDED.owner_pid, owner_start = EXCLUDED.owner_start, \
                       state = 'running', \
                       chunks = CASE WHEN p.state OPERATOR(pg_catalog.=) 'finished' THEN 0 ELSE p.chunks END, \
                       rows = CASE WHEN p.state OPERATOR(pg_catalog.=) 'finished' THEN 0 ELSE p.rows END, \
                       last_key = CASE WHEN p.state OPERATOR(pg_catalog.=) 'finished' THEN NULL ELSE p.last_key END, \
                       started = CASE WHEN p.state OPERATOR(pg_catalog.=) 'finished' THEN pg_catalog.now() ELSE p.started END, \
                       finished = NULL, updated = pg_catalog.now() \
                     WHERE p.state OPERATOR(pg_catalog.=) 'finished' \
                        OR p.owner_pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() \
                        OR NOT EXISTS (SELECT FROM pg_catalog.pg_stat_activity s \
                                       WHERE s.pid OPERATOR(pg_catalog.=) p.owner_pid \
                                         AND s.backend_start OPERATOR(pg_catalog.=) p.owner_start) \
                     RETURNING p.relid",
                    None,
                    &[oid_arg(relation), DatumWithOid::from(name.as_str())],
                );
                matches!(row, Ok(t) if !t.is_empty())
            })
        });
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
    }

    /// Reads and sends the next chunk of `relation` (see the module
    /// comment); true when it was the last.
    #[pg_extern(volatile, parallel_unsafe, name = "_backfill_chunk")]
    #[search_path(pg_catalog, pg_temp)]
    fn backfill_chunk(relation: pg_sys::Oid, chunk_rows: i32, chunk_bytes: i64) -> bool {
        check_sizes(chunk_rows, chunk_bytes);
        check_readable(relation);
        // The progress row, locked for the chunk's transaction.
        let progress = as_owner(|| {
            Spi::connect_mut(|client| {
                let t = client
                    .update(
                        "SELECT p.chunks, p.rows, p.last_key, \
                                p.owner_pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() \
                         FROM pubjson.backfill_progress p \
                         WHERE p.relid OPERATOR(pg_catalog.=) $1 AND p.state OPERATOR(pg_catalog.=) 'running' \
                         FOR UPDATE",
                        None,
                        &[oid_arg(relation)],
                    )
                    .ok()?;
                let row = t.first();
                Some((
                    row.get::<i64>(1).ok()??,
                    row.get::<i64>(2).ok()??,
                    row.get::<Vec<String>>(3).ok()?,
                    row.get::<bool>(4).ok()??,
                ))
            })
        });
        let Some((chunks, rows_done, last_key, mine)) = progress else {
            error(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!("no backfill of relation {relation} is running"),
                "Call pubjson.backfill(), which starts one.",
            );
        };
        if !mine {
            error(
                PgSqlErrorCode::ERRCODE_OBJECT_IN_USE,
                format!("the backfill of relation {relation} was taken over by another session"),
                "",
            );
        }

        let (rows, keys, exhausted) = Spi::connect_mut(|client| {
            let (_, key) = key_of(client, relation);
            read_chunk(
                client,
                relation,
                &key,
                last_key.as_deref(),
                chunk_rows,
                chunk_bytes,
            )
        });
        let rows_so_far = rows_done as u64 + rows.len() as u64;
        let flags = if chunks == 0 { FIRST } else { 0 } | if exhausted { LAST } else { 0 };
        let borrowed: Vec<&[u8]> = rows.iter().map(Vec::as_slice).collect();
        let message = backfill::encode(relation.to_u32(), flags, rows_so_far, &borrowed);
        let digest = backfill::digest(&message).to_vec();
        // The progress row first: the decoder must have seen the digest by
        // the time it decodes the message.
        as_owner(|| {
            Spi::connect_mut(|client| {
                client
                    .update(
                        "UPDATE pubjson.backfill_progress SET \
                           chunks = chunks OPERATOR(pg_catalog.+) 1, rows = $2, \
                           last_key = coalesce($3, last_key), digest = $4, updated = pg_catalog.now(), \
                           state = CASE WHEN $5 THEN 'finished' ELSE 'running' END, \
                           finished = CASE WHEN $5 THEN pg_catalog.now() END \
                         WHERE relid OPERATOR(pg_catalog.=) $1",
                        None,
                        &[
                            oid_arg(relation),
                            DatumWithOid::from(rows_so_far as i64),
                            DatumWithOid::from(keys),
                            DatumWithOid::from(digest.as_slice()),
                            DatumWithOid::from(exhausted),
                        ],
                    )
                    .map(|_| ())
            })
        })
        .unwrap_or_else(|e| {
            error(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("could not record the backfill's progress: {e}"),
                "",
            )
        });
        // As the caller: writing logical messages is their privilege.
        Spi::connect_mut(|client| {
            client
                .update(
                    "SELECT pg_catalog.pg_logical_emit_message(true, $1, $2)",
                    None,
                    &[
                        DatumWithOid::from(
                            std::str::from_utf8(backfill::PREFIX).unwrap_or_default(),
                        ),
                        DatumWithOid::from(message.as_slice()),
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
        exhausted
    }
}

/// The next rows of `relation` after `after` (the last key's text, `None`
/// for the first chunk), in key order, locked `FOR SHARE`, at most
/// `chunk_rows` of them and about `chunk_bytes`: each row's bytes (a
/// detoasted composite datum of its row type), the last row's key as text
/// (`None` when no row was read) and whether the table has no more rows.
fn read_chunk(
    client: &mut SpiClient<'_>,
    relation: pg_sys::Oid,
    key: &Key,
    after: Option<&[String]>,
    chunk_rows: i32,
    chunk_bytes: i64,
) -> (Vec<Vec<u8>>, Option<Vec<String>>, bool) {
    let table = Spi::get_one_with_args::<String>(
        "SELECT pg_catalog.format('%s', $1::pg_catalog.regclass)",
        &[oid_arg(relation)],
    )
    .ok()
    .flatten()
    .unwrap_or_default();
    // The row's alias must not be a column's name (a column would win).
    // Key columns are qualified with it everywhere: a bare name in ORDER BY
    // would mean the output column of that name (the key's text).
    let alias = "\"pubjson backfill row\"";
    let qualified: Vec<String> = key.columns.iter().map(|c| format!("{alias}.{c}")).collect();
    let columns = qualified.join(", ");
    let texts: Vec<String> = qualified
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{c}::pg_catalog.text AS key{i}"))
        .collect();
    let mut query = format!(
        "SELECT {alias}, {} FROM ONLY {table} AS {alias}",
        texts.join(", ")
    );
    if after.is_some() {
        let params: Vec<String> = key
            .types
            .iter()
            .enumerate()
            .map(|(i, t)| format!("CAST(${} AS {t})", i + 1))
            .collect();
        if qualified.len() == 1 {
            query += &format!(" WHERE {columns} OPERATOR(pg_catalog.>) {}", params[0]);
        } else {
            query += &format!(
                " WHERE ROW({columns}) OPERATOR(pg_catalog.>) ROW({})",
                params.join(", ")
            );
        }
    }
    query += &format!(" ORDER BY {columns} LIMIT {chunk_rows} FOR SHARE OF {alias}");
    let args: Vec<DatumWithOid> = after
        .unwrap_or_default()
        .iter()
        .map(|k| DatumWithOid::from(k.as_str()))
        .collect();
    let mut cursor = client.open_cursor_mut(query.as_str(), &args);
    let mut rows = Vec::new();
    let mut bytes = 0i64;
    let mut last = None;
    let mut fetched = 0i64;
    let mut stopped_by_bytes = false;
    'fetch: loop {
        let batch = cursor.fetch(100).unwrap_or_else(|e| {
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
            fetched += 1;
            let Ok(Some(value)) = row.get::<pgrx::AnyElement>(1) else {
                continue;
            };
            let datum = value.datum();
            // SAFETY: a non-null composite datum of the relation's row type
            // (the query's first column); pg_detoast_datum returns it
            // untoasted with a 4-byte header, palloc'd in the SPI context
            // or in place, valid until SPI_finish; VARSIZE bytes follow.
            let row_bytes = unsafe {
                let value = pg_sys::pg_detoast_datum(datum.cast_mut_ptr());
                let len = pgrx::varlena::varsize_any(value);
                std::slice::from_raw_parts(value as *const u8, len).to_vec()
            };
            bytes += row_bytes.len() as i64;
            rows.push(row_bytes);
            let key_text: Vec<String> = (0..key.columns.len())
                .map(|i| row.get::<String>(i + 2).ok().flatten().unwrap_or_default())
                .collect();
            last = Some(key_text);
            if bytes >= chunk_bytes {
                stopped_by_bytes = fetched < chunk_rows as i64;
                break 'fetch;
            }
        }
    }
    let exhausted = !stopped_by_bytes && fetched < chunk_rows as i64;
    (rows, last, exhausted)
}
