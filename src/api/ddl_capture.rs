//! `pubjson._ddl_event()`, the function of DDL capture's event triggers
//! (the triggers and the switch are in `ddl.sql`; docs/ddl.md).
//!
//! It writes one transactional logical message, prefix `pubjson.ddl`, per
//! DDL command, which `plugin::ddl` decodes. Written in Rust, not
//! PL/pgSQL, for its cost: the PL/pgSQL version ran one catalog query of
//! some forty plan nodes per command, which made a DDL-heavy script about
//! 1.5 times slower; here a command costs one read of
//! `pg_event_trigger_ddl_commands()` through a kept plan, syscache lookups
//! and the message (docs/performance.md, "DDL capture").
//!
//! Security (the reasons `ddl.sql` gives): it runs as the role that ran the
//! DDL, not SECURITY DEFINER, and keeps that role's `search_path` (it
//! reports it), so every query below names only `pg_catalog` objects,
//! schema-qualified, operators included; names and the statement travel
//! only as JSON values. It calls nothing in schema `pubjson`, so a role
//! needs no privilege on it (an event trigger's function is run without an
//! EXECUTE check).
//!
//! No subtransaction: a message written in one is decoded after the
//! changes its transaction made later (the order of the command's rows
//! would be lost); what it runs reads the catalogs the command just changed
//! and cannot fail where the command did not.

use pgrx::prelude::*;
use pgrx::spi::OwnedPreparedStatement;
use std::cell::OnceCell;
use std::ffi::CStr;

use crate::pg::settings::without_jit;
use crate::text::json::{push_escaped_text, push_u64};
use crate::text::sql_redact::{self, Statement};

/// `pubjson.ddl_capture_command`: what capture writes of the statement
/// text (docs/ddl.md).
#[derive(Clone, Copy, PartialEq, Eq, pgrx::PostgresGucEnum)]
pub enum CommandText {
    /// The text, with every value that may be a credential replaced.
    #[name = c"redacted"]
    Redacted,
    /// No text at all.
    #[name = c"none"]
    None,
}

static COMMAND_TEXT: pgrx::GucSetting<CommandText> =
    pgrx::GucSetting::<CommandText>::new(CommandText::Redacted);

/// Defines `pubjson.ddl_capture_command` (`_PG_init`). Only a superuser
/// may change it (also per database or role with `ALTER ... SET`): an
/// operator who wants no text in the stream gets none.
pub fn define_settings() {
    pgrx::GucRegistry::define_enum_guc(
        c"pubjson.ddl_capture_command",
        c"What DDL capture writes of the statement text: redacted or none.",
        c"redacted (the default): the client's statement with every value that may be a \
          credential replaced by '[redacted]'; none: no statement text at all.",
        &COMMAND_TEXT,
        pgrx::GucContext::Suset,
        pgrx::GucFlags::default(),
    );
}

/// The prefix the decoder recognizes (`plugin::ddl`).
const PREFIX: &str = "pubjson.ddl";
/// A statement longer than this many characters is cut: every command of a
/// multi-statement query string carries the whole string, and a large
/// migration script must not make each of its commands write it again.
const COMMAND_CHARS: i32 = 65536;

/// The commands of a `ddl_command_end` event, in the order they ran: the
/// commands of an extension's script are left out (its CREATE EXTENSION is
/// the event), and so are temporary objects.
const COMMANDS: &str = "SELECT c.classid, c.objid, c.objsubid, c.command_tag, c.object_type, \
       c.schema_name, c.object_identity \
  FROM pg_catalog.pg_event_trigger_ddl_commands() c \
 WHERE NOT c.in_extension \
   AND coalesce(c.schema_name OPERATOR(pg_catalog.<>) 'pg_temp', true)";

/// A `sql_drop` event's objects (those named and those dropped by CASCADE,
/// and a dropped table's partitions, not the parts that go with them), as
/// a JSON array, and the publications that published a dropped table (the
/// catalog no longer can say at the message): its own memberships, FOR ALL
/// TABLES ones and those of its schema. NULL objects: only temporary ones.
const DROPPED: &str = "WITH d AS MATERIALIZED (
    SELECT x.*, x.ordinality AS position
      FROM pg_catalog.pg_event_trigger_dropped_objects() WITH ORDINALITY AS x
), t AS (
    SELECT d.schema_name FROM d
     WHERE d.object_type OPERATOR(pg_catalog.=) ANY ('{table,partitioned table}'::pg_catalog.text[])
       AND NOT d.is_temporary
)
SELECT (SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
                   'type', d.object_type, 'schema', d.schema_name,
                   'identity', d.object_identity, 'oid', d.objid,
                   'classid', d.classid, 'subid', d.objsubid)
                   ORDER BY d.position)
          FROM d
         WHERE (d.original OR d.normal OR d.object_type OPERATOR(pg_catalog.=) 'table')
           AND NOT d.is_temporary)::pg_catalog.text,
       (SELECT pg_catalog.json_agg(DISTINCT n.name ORDER BY n.name)
          FROM (SELECT d.address_args[1] AS name FROM d
                 WHERE d.object_type OPERATOR(pg_catalog.=) 'publication relation'
                UNION
                SELECT p.pubname::pg_catalog.text FROM pg_catalog.pg_publication p
                 WHERE p.puballtables AND EXISTS (SELECT FROM t)
                UNION
                SELECT p.pubname::pg_catalog.text
                  FROM pg_catalog.pg_publication p
                  JOIN pg_catalog.pg_publication_namespace pn ON pn.pnpubid OPERATOR(pg_catalog.=) p.oid
                  JOIN pg_catalog.pg_namespace s ON s.oid OPERATOR(pg_catalog.=) pn.pnnspid
                  JOIN t ON t.schema_name OPERATOR(pg_catalog.=) s.nspname::pg_catalog.text) n)::pg_catalog.text";

/// The table a trigger or a table constraint belongs to (no syscache
/// finds a trigger by OID; both are rare commands).
const OWNING_TABLE: &str = "SELECT t.tgrelid FROM pg_catalog.pg_trigger t
 WHERE $1 OPERATOR(pg_catalog.=) 'pg_catalog.pg_trigger'::pg_catalog.regclass::pg_catalog.oid
   AND t.oid OPERATOR(pg_catalog.=) $2
UNION ALL
SELECT o.conrelid FROM pg_catalog.pg_constraint o
 WHERE $1 OPERATOR(pg_catalog.=) 'pg_catalog.pg_constraint'::pg_catalog.regclass::pg_catalog.oid
   AND o.oid OPERATOR(pg_catalog.=) $2
   AND o.conrelid OPERATOR(pg_catalog.<>) 0::pg_catalog.oid";

/// A partitioned table's partitions at every level that are tables or
/// partitioned tables: a change of the parent (ALTER TABLE recurses,
/// ATTACH PARTITION) changes them too.
const PARTITIONS: &str = "SELECT t.relid::pg_catalog.oid
  FROM pg_catalog.pg_partition_tree($1::pg_catalog.regclass) t
  JOIN pg_catalog.pg_class k ON k.oid OPERATOR(pg_catalog.=) t.relid::pg_catalog.oid
 WHERE t.relid::pg_catalog.oid OPERATOR(pg_catalog.<>) $1
   AND k.relkind OPERATOR(pg_catalog.=) ANY ('{r,p}'::pg_catalog.\"char\"[])";

/// `pg_constraint`'s OID (`ConstraintRelationId`, fixed in
/// catalog/pg_constraint.h; pgrx's bindings do not include that header).
const CONSTRAINT_RELATION_ID: pg_sys::Oid = pg_sys::Oid::from_u32(2606);

thread_local! {
    // The statements of the last query string analysed, and the string:
    // every command of a multi-statement string carries it, so a migration
    // script sent as one string is parsed once, not once per command.
    static LAST_PARSE: std::cell::RefCell<(Vec<u8>, Option<Vec<Statement>>)> =
        const { std::cell::RefCell::new((Vec::new(), None)) };
    // Plans kept for the backend's life (SPI_keepplan): planning them at
    // every command would cost more than running them. Leaked, never
    // dropped: a thread-local's destructor runs in exit(), after
    // PostgreSQL's shutdown, where freeing a plan has nothing to free into.
    static COMMANDS_PLAN: OnceCell<&'static OwnedPreparedStatement> = const { OnceCell::new() };
    static DROPPED_PLAN: OnceCell<&'static OwnedPreparedStatement> = const { OnceCell::new() };
}

/// One row of `pg_event_trigger_ddl_commands()`; its text in the server's
/// encoding.
struct Command {
    classid: pg_sys::Oid,
    objid: pg_sys::Oid,
    subid: i32,
    tag: Option<Vec<u8>>,
    object_type: Option<Vec<u8>>,
    schema: Option<Vec<u8>>,
    identity: Option<Vec<u8>>,
}

/// What one event reports: the pieces of the message that come from the
/// catalogs.
struct Event {
    /// The objects as a JSON array.
    objects: Vec<u8>,
    relations: Vec<u32>,
    /// The publications as a JSON array.
    publications: Vec<u8>,
    /// One of the commands carries credentials
    /// ([`sql_redact::is_credential_tag`]).
    credential_command: bool,
}

#[pg_extern(
    name = "_ddl_event",
    sql = "
-- The event triggers' function: the message of one DDL command
-- (src/api/ddl_capture.rs). Not SECURITY DEFINER and no SET search_path:
-- it runs as the role that ran the DDL and reports that role's path.
CREATE FUNCTION pubjson._ddl_event()
RETURNS event_trigger
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'ddl_event_wrapper';
"
)]
fn ddl_event(fcinfo: pg_sys::FunctionCallInfo) {
    // SAFETY: fcinfo is the call's own (pgrx's wrapper passes it through);
    // its context is a Node when set, and an EventTriggerData exactly when
    // its tag says so (CALLED_AS_EVENT_TRIGGER), which PostgreSQL's
    // EventTriggerInvoke fills for the duration of the call.
    let trigger = unsafe {
        let context = (*fcinfo).context;
        if context.is_null() || (*context).type_ != pg_sys::NodeTag::T_EventTriggerData {
            ereport!(
                PgLogLevel::ERROR,
                PgSqlErrorCode::ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED,
                "pubjson._ddl_event() can only be called as an event trigger"
            );
        }
        &*(context as *const pg_sys::EventTriggerData)
    };
    // SAFETY: `event` is a static C string and GetCommandTagName returns
    // one for every tag.
    let (event, tag) = unsafe {
        (
            CStr::from_ptr(trigger.event).to_bytes().to_vec(),
            CStr::from_ptr(pg_sys::GetCommandTagName(trigger.tag))
                .to_bytes()
                .to_vec(),
        )
    };
    let drop_command = tag.starts_with(b"DROP ");
    // The catalog queries (kept plans included: JIT is decided when they
    // are planned) are never JIT-compiled (pg::settings).
    let found = without_jit(|| match event.as_slice() {
        // A DROP command's own message; an ALTER TABLE that drops a column
        // or constraint is reported by its ddl_command_end message.
        b"sql_drop" if drop_command => dropped(),
        // A DROP command's objects are in its sql_drop message.
        b"ddl_command_end" if !drop_command => commands(),
        _ => None,
    });
    // None: nothing to report (only temporary objects, or pubjson's own).
    let Some(found) = found else { return };
    let credential_command = found.credential_command || sql_redact::is_credential_tag(&tag);
    let message = capture_message(&CaptureMessage {
        event: &event,
        tag: &tag,
        command: current_statement(credential_command),
        role: &current_role(),
        search_path: &current_search_path(),
        found: &found,
    });
    emit(&message);
}

/// The `ddl_command_end` event's commands and the tables they changed.
fn commands() -> Option<Event> {
    let rows = Spi::connect(|client| {
        COMMANDS_PLAN.with(|plan| {
            let plan = *plan.get_or_init(|| prepare(client, COMMANDS));
            let mut table = client.select(plan, None, &[])?;
            let mut rows = Vec::with_capacity(table.len());
            while table.next().is_some() {
                rows.push(Command {
                    classid: table.get(1)?.unwrap_or(pg_sys::InvalidOid),
                    objid: table.get(2)?.unwrap_or(pg_sys::InvalidOid),
                    subid: table.get(3)?.unwrap_or(0),
                    tag: text_at(&table, 4)?,
                    object_type: text_at(&table, 5)?,
                    schema: text_at(&table, 6)?,
                    identity: text_at(&table, 7)?,
                });
            }
            Ok::<_, pgrx::spi::Error>(rows)
        })
    })
    .unwrap_or_else(|e| spi_failed(e));
    // enable_ddl_capture's own ALTER EXTENSION pubjson ADD.
    // SAFETY: a catalog lookup by name; missing_ok, so no ERROR.
    let pubjson = unsafe { pg_sys::get_extension_oid(c"pubjson".as_ptr(), true) };
    let rows: Vec<Command> = rows
        .into_iter()
        .filter(|c| !(c.classid == pg_sys::ExtensionRelationId && c.objid == pubjson))
        .collect();
    if rows.is_empty() {
        return None;
    }
    let relations: Vec<pg_sys::Oid> = rows
        .iter()
        .filter_map(|c| changed_table(c.classid, c.objid))
        .collect();
    let mut tree: Vec<u32> = relations.iter().map(|o| o.to_u32()).collect();
    for &relid in &relations {
        if relkind(relid) == b'p' {
            tree.extend(partitions(relid).into_iter().map(|o| o.to_u32()));
        }
    }
    tree.sort_unstable();
    tree.dedup();
    let credential_command = rows
        .iter()
        .any(|c| c.tag.as_deref().is_some_and(sql_redact::is_credential_tag));
    Some(Event {
        objects: objects_json(&rows),
        relations: tree,
        publications: b"[]".to_vec(),
        credential_command,
    })
}

/// The `sql_drop` event's objects and the publications of its tables.
fn dropped() -> Option<Event> {
    let (objects, publications) = Spi::connect(|client| {
        DROPPED_PLAN.with(|plan| {
            let plan = *plan.get_or_init(|| prepare(client, DROPPED));
            let table = client.select(plan, Some(1), &[])?.first();
            Ok::<_, pgrx::spi::Error>((text_at(&table, 1)?, text_at(&table, 2)?))
        })
    })
    .unwrap_or_else(|e| spi_failed(e));
    Some(Event {
        objects: objects?,
        relations: Vec::new(),
        publications: publications.unwrap_or_else(|| b"[]".to_vec()),
        credential_command: false,
    })
}

/// A text column of the current row, as its bytes in the server's encoding
/// (pgrx's `String` refuses text that is not UTF-8, and the database's
/// encoding need not be).
fn text_at(
    table: &pgrx::spi::SpiTupleTable<'_>,
    ordinal: usize,
) -> Result<Option<Vec<u8>>, pgrx::spi::Error> {
    Ok(table.get_datum_by_ordinal(ordinal)?.map(|datum| {
        // SAFETY: the column is text (the queries above say so), a
        // non-null varlena in SPI's memory, which lives until the
        // connection ends; the bytes are copied before.
        unsafe { crate::pg::port::varlena_bytes(datum).to_vec() }
    }))
}

fn prepare(client: &pgrx::spi::SpiClient<'_>, query: &str) -> &'static OwnedPreparedStatement {
    let plan = client
        .prepare(query, &[])
        .unwrap_or_else(|e| spi_failed(e))
        .keep();
    Box::leak(Box::new(plan))
}

fn spi_failed(e: pgrx::spi::Error) -> ! {
    ereport!(
        PgLogLevel::ERROR,
        PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
        format!("pubjson: DDL capture could not read the event's objects: {e}")
    );
    unreachable!()
}

/// The table whose definition a command on this object changed: a table
/// itself, or an index's, a trigger's or a table constraint's table.
fn changed_table(classid: pg_sys::Oid, objid: pg_sys::Oid) -> Option<pg_sys::Oid> {
    if classid == pg_sys::RelationRelationId {
        return match relkind(objid) {
            b'r' | b'p' => Some(objid),
            // SAFETY: a syscache lookup; missing_ok, so no ERROR.
            b'i' | b'I' => Some(unsafe { pg_sys::IndexGetRelation(objid, true) })
                .filter(|&o| o != pg_sys::InvalidOid),
            _ => None,
        };
    }
    if classid != pg_sys::TriggerRelationId && classid != CONSTRAINT_RELATION_ID {
        return None;
    }
    Spi::get_one_with_args::<pg_sys::Oid>(OWNING_TABLE, &[classid.into(), objid.into()])
        .unwrap_or_else(|e| match e {
            pgrx::spi::Error::InvalidPosition => None,
            e => spi_failed(e),
        })
}

/// `pg_class.relkind`, 0 for a relation that does not exist.
fn relkind(relid: pg_sys::Oid) -> u8 {
    // SAFETY: a syscache lookup that returns '\0' for a missing relation.
    unsafe { pg_sys::get_rel_relkind(relid) as u8 }
}

fn partitions(relid: pg_sys::Oid) -> Vec<pg_sys::Oid> {
    Spi::connect(|client| {
        client
            .select(PARTITIONS, None, &[relid.into()])?
            .map(|row| row.get::<pg_sys::Oid>(1))
            .collect::<Result<Vec<_>, _>>()
    })
    .unwrap_or_else(|e| spi_failed(e))
    .into_iter()
    .flatten()
    .collect()
}

fn objects_json(rows: &[Command]) -> Vec<u8> {
    let mut out = b"[".to_vec();
    for (i, c) in rows.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"type\":");
        push_nullable(&mut out, c.object_type.as_deref());
        out.extend_from_slice(b",\"schema\":");
        push_nullable(&mut out, c.schema.as_deref());
        out.extend_from_slice(b",\"identity\":");
        push_nullable(&mut out, c.identity.as_deref());
        out.extend_from_slice(b",\"oid\":");
        push_u64(&mut out, c.objid.to_u32().into());
        out.extend_from_slice(b",\"classid\":");
        push_u64(&mut out, c.classid.to_u32().into());
        out.extend_from_slice(b",\"subid\":");
        crate::text::json::push_i64(&mut out, c.subid.into());
        out.extend_from_slice(b",\"tag\":");
        push_nullable(&mut out, c.tag.as_deref());
        out.push(b'}');
    }
    out.push(b']');
    out
}

fn push_nullable(out: &mut Vec<u8>, s: Option<&[u8]>) {
    match s {
        Some(s) => push_escaped_text(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// What capture writes of the statement that ran (`current_query()`):
/// the text with every value that may be a credential replaced
/// ([`sql_redact::redact`]; all of them when `credential_command`), at
/// most [`COMMAND_CHARS`] characters of it.
fn current_statement(credential_command: bool) -> CommandShown {
    if COMMAND_TEXT.get() == CommandText::None {
        return CommandShown::Withheld;
    }
    // SAFETY: debug_query_string is the backend's current query string or
    // NULL; it lives until the query ends.
    let query = unsafe {
        let query = pg_sys::debug_query_string;
        if query.is_null() {
            return CommandShown::NoStatement;
        }
        CStr::from_ptr(query)
    };
    let bytes = query.to_bytes();
    let statements = LAST_PARSE.with(|last| {
        let mut last = last.borrow_mut();
        if last.0 != bytes {
            *last = (bytes.to_vec(), crate::pg::sql_parse::statements(query));
        }
        last.1.clone()
    });
    // Text the parser cannot split for sure: nothing of it.
    let Some(statements) = statements else {
        return CommandShown::Withheld;
    };
    let shown = sql_redact::redact(bytes, &statements, credential_command);
    let len = i32::try_from(shown.text.len()).unwrap_or(i32::MAX);
    // SAFETY: pg_mbcharcliplen reads at most `len` bytes of the text, in
    // the server's encoding (redaction only replaces whole constants and
    // comments with ASCII).
    let kept = unsafe {
        pg_sys::pg_mbcharcliplen(shown.text.as_ptr().cast(), len, COMMAND_CHARS) as usize
    };
    let kept = kept.min(shown.text.len());
    CommandShown::Text {
        truncated: kept < shown.text.len(),
        text: shown.text[..kept].to_vec(),
        redacted: shown.redacted,
    }
}

fn current_role() -> Vec<u8> {
    // SAFETY: the current user exists (noerr = false raises an ERROR if it
    // does not); the name is a palloc'd C string.
    unsafe {
        CStr::from_ptr(pg_sys::GetUserNameFromId(pg_sys::GetUserId(), false))
            .to_bytes()
            .to_vec()
    }
}

fn current_search_path() -> Vec<u8> {
    // SAFETY: search_path always exists; the value is a palloc'd C string.
    unsafe {
        let value =
            pg_sys::GetConfigOptionByName(c"search_path".as_ptr(), std::ptr::null_mut(), false);
        CStr::from_ptr(value).to_bytes().to_vec()
    }
}

/// `pg_logical_emit_message(boolean, text, text[, boolean])`: the same OID
/// in 15 to 18 (17 added the last argument).
const EMIT_MESSAGE_TEXT: pg_sys::Oid = pg_sys::Oid::from_u32(3577);

/// Writes the message (`pg_logical_emit_message(true, 'pubjson.ddl', ...)`):
/// in the command's transaction, decoded where it commits. Only for a role
/// that may call `pg_logical_emit_message` itself: capture never writes to
/// the WAL for a role what an administrator revoked from it (its DDL fails,
/// 42501, as docs/ddl.md says).
fn emit(message: &[u8]) {
    // SAFETY: an ACL check of a built-in function that exists;
    // aclcheck_error raises the ERROR (42501) for a result that is not OK.
    unsafe {
        let user = pg_sys::GetUserId();
        let execute = pg_sys::ACL_EXECUTE as pg_sys::AclMode;
        #[cfg(feature = "pg15")]
        let allowed = pg_sys::pg_proc_aclcheck(EMIT_MESSAGE_TEXT, user, execute);
        #[cfg(not(feature = "pg15"))]
        let allowed = pg_sys::object_aclcheck(
            pg_sys::ProcedureRelationId,
            EMIT_MESSAGE_TEXT,
            user,
            execute,
        );
        if allowed != pg_sys::AclResult::ACLCHECK_OK {
            pg_sys::aclcheck_error(
                allowed,
                pg_sys::ObjectType::OBJECT_FUNCTION,
                c"pg_logical_emit_message".as_ptr(),
            );
        }
    }
    // SAFETY: pg_logical_emit_message_bytea reads its arguments as
    // (transactional bool, prefix text, content bytea[, flush bool]): 15 and
    // 16 read three, 17 and later a fourth, `flush`, false as its SQL
    // default.
    unsafe {
        pgrx::direct_function_call_as_datum(
            pg_sys::pg_logical_emit_message_bytea,
            &[
                true.into_datum(),
                PREFIX.into_datum(),
                message.into_datum(),
                false.into_datum(),
            ],
        );
    }
}

/// What a capture message says of the statement.
enum CommandShown {
    /// Outside a client's query (no statement text exists).
    NoStatement,
    /// Withheld: `pubjson.ddl_capture_command` is `none`, or the text
    /// could not be analysed.
    Withheld,
    Text {
        text: Vec<u8>,
        /// Cut at [`COMMAND_CHARS`].
        truncated: bool,
        /// Values were replaced.
        redacted: bool,
    },
}

/// The parts of one capture message.
struct CaptureMessage<'a> {
    event: &'a [u8],
    tag: &'a [u8],
    command: CommandShown,
    role: &'a [u8],
    search_path: &'a [u8],
    found: &'a Event,
}

/// The message's JSON text, in the server's encoding (the keys
/// `output::v3::ddl::parse_event` reads).
fn capture_message(m: &CaptureMessage<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + m.found.objects.len());
    out.extend_from_slice(b"{\"event\":");
    push_escaped_text(&mut out, m.event);
    out.extend_from_slice(b",\"tag\":");
    push_escaped_text(&mut out, m.tag);
    out.extend_from_slice(b",\"command\":");
    let (truncated, redacted) = match &m.command {
        CommandShown::Text {
            text,
            truncated,
            redacted,
        } => {
            push_escaped_text(&mut out, text);
            (*truncated, *redacted)
        }
        CommandShown::NoStatement => {
            out.extend_from_slice(b"null");
            (false, false)
        }
        CommandShown::Withheld => {
            out.extend_from_slice(b"null");
            (false, true)
        }
    };
    out.extend_from_slice(b",\"command_truncated\":");
    out.extend_from_slice(if truncated { b"true" } else { b"false" });
    out.extend_from_slice(b",\"command_redacted\":");
    out.extend_from_slice(if redacted { b"true" } else { b"false" });
    out.extend_from_slice(b",\"role\":");
    push_escaped_text(&mut out, m.role);
    out.extend_from_slice(b",\"search_path\":");
    push_escaped_text(&mut out, m.search_path);
    out.extend_from_slice(b",\"objects\":");
    out.extend_from_slice(&m.found.objects);
    out.extend_from_slice(b",\"relations\":[");
    for (i, relid) in m.found.relations.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_u64(&mut out, (*relid).into());
    }
    out.extend_from_slice(b"],\"publications\":");
    out.extend_from_slice(&m.found.publications);
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(objects: &[u8], relations: &[u32], publications: &[u8]) -> Event {
        Event {
            objects: objects.to_vec(),
            relations: relations.to_vec(),
            publications: publications.to_vec(),
            credential_command: false,
        }
    }

    fn text(text: &[u8], truncated: bool, redacted: bool) -> CommandShown {
        CommandShown::Text {
            text: text.to_vec(),
            truncated,
            redacted,
        }
    }

    #[test]
    fn message_has_every_key_in_order() {
        let found = event(b"[{\"type\":\"table\"}]", &[16384, 16390], b"[]");
        let m = capture_message(&CaptureMessage {
            event: b"ddl_command_end",
            tag: b"CREATE TABLE",
            command: text(b"create table \"t\" (a int);\n", false, false),
            role: b"alice",
            search_path: b"\"$user\", public",
            found: &found,
        });
        assert_eq!(
            m,
            b"{\"event\":\"ddl_command_end\",\"tag\":\"CREATE TABLE\",\
\"command\":\"create table \\\"t\\\" (a int);\\n\",\"command_truncated\":false,\
\"command_redacted\":false,\"role\":\"alice\",\"search_path\":\"\\\"$user\\\", public\",\
\"objects\":[{\"type\":\"table\"}],\"relations\":[16384,16390],\"publications\":[]}"
                .to_vec()
        );
    }

    #[test]
    fn message_without_statement_or_relations() {
        let found = event(b"[]", &[], b"[\"p\"]");
        let m = capture_message(&CaptureMessage {
            event: b"sql_drop",
            tag: b"DROP TABLE",
            command: CommandShown::NoStatement,
            role: b"r",
            search_path: b"",
            found: &found,
        });
        assert_eq!(
            m,
            b"{\"event\":\"sql_drop\",\"tag\":\"DROP TABLE\",\"command\":null,\
\"command_truncated\":false,\"command_redacted\":false,\"role\":\"r\",\"search_path\":\"\",\"objects\":[],\
\"relations\":[],\"publications\":[\"p\"]}"
                .to_vec()
        );
    }

    #[test]
    fn cut_statement_is_flagged() {
        let found = event(b"[]", &[1], b"[]");
        let m = capture_message(&CaptureMessage {
            event: b"ddl_command_end",
            tag: b"ALTER TABLE",
            command: text(b"alter", true, false),
            role: b"r",
            search_path: b"public",
            found: &found,
        });
        let text = String::from_utf8(m).unwrap();
        assert!(text.contains(
            "\"command\":\"alter\",\"command_truncated\":true,\"command_redacted\":false,"
        ));
    }

    #[test]
    fn the_decoder_reads_what_is_written() {
        // Non-ASCII bytes of a non-UTF-8 server encoding (LATIN1 "é" is
        // 0xE9) stay as they are, as json_build_object leaves them.
        let objects = objects_json(&[Command {
            classid: pg_sys::RelationRelationId,
            objid: pg_sys::Oid::from(16384u32),
            subid: 0,
            tag: Some(b"CREATE TABLE".to_vec()),
            object_type: Some(b"table".to_vec()),
            schema: Some(b"public".to_vec()),
            identity: Some(b"public.t".to_vec()),
        }]);
        let found = event(&objects, &[16384], b"[]");
        let m = capture_message(&CaptureMessage {
            event: b"ddl_command_end",
            tag: b"CREATE TABLE",
            command: text(b"create table t (\xe9 int)", false, false),
            role: b"r",
            search_path: b"public",
            found: &found,
        });
        assert!(m.windows(2).any(|w| w == b"(\xe9"));
        let parsed = crate::output::v3::ddl::parse_event(&m).expect("a capture message");
        assert_eq!(parsed.relations, vec![16384]);
        assert_eq!(parsed.objects.len(), 1);
        assert_eq!(parsed.command, Some(b"create table t (\xe9 int)".to_vec()));
    }
}
