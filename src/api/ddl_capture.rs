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

use crate::pg::error;
use crate::pg::event_trigger::Fired;
use crate::pg::server_encoding::clip_chars;
use crate::pg::settings::without_jit;
use crate::pg::{catalog, logical_message, session, spi};

use pubjson_core::protocol::ddl::{self, Command as CommandShown, CommandObject};
use pubjson_core::text::sql_redact::{self, Statement};

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

/// One firing of the event triggers (`api/event_trigger.rs`): the
/// message of one DDL command.
pub fn capture(fired: Fired) {
    let Fired { event, tag } = fired;
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
    let command = current_statement(credential_command);
    let message = ddl::write(&ddl::Message {
        event: &event,
        tag: &tag,
        command: &command,
        role: &session::current_user_name(),
        search_path: &session::search_path(),
        objects: &found.objects,
        relations: &found.relations,
        publications: &found.publications,
        xid: session::current_xid(),
    });
    // In the command's transaction, decoded where it commits.
    logical_message::emit_transactional(
        std::str::from_utf8(ddl::PREFIX).unwrap_or_default(),
        &message,
    );
}

/// The `ddl_command_end` event's commands and the tables they changed.
fn commands() -> Option<Event> {
    let rows = Spi::connect(|client| {
        COMMANDS_PLAN.with(|plan| {
            let plan = *plan.get_or_init(|| prepare(client, COMMANDS));
            let mut table = client.select(plan, None, &[])?;
            let mut rows = Vec::with_capacity(table.len());
            while table.next().is_some() {
                rows.push(CommandObject {
                    classid: table
                        .get::<pg_sys::Oid>(1)?
                        .unwrap_or(pg_sys::InvalidOid)
                        .to_u32(),
                    objid: table
                        .get::<pg_sys::Oid>(2)?
                        .unwrap_or(pg_sys::InvalidOid)
                        .to_u32(),
                    subid: table.get(3)?.unwrap_or(0),
                    tag: spi::text_bytes(&table, 4)?,
                    object_type: spi::text_bytes(&table, 5)?,
                    schema: spi::text_bytes(&table, 6)?,
                    identity: spi::text_bytes(&table, 7)?,
                });
            }
            Ok::<_, pgrx::spi::Error>(rows)
        })
    })
    .unwrap_or_else(|e| spi_failed(e));
    // enable_ddl_capture's own ALTER EXTENSION pubjson ADD.
    let pubjson = catalog::extension_oid(c"pubjson");
    let rows: Vec<CommandObject> = rows
        .into_iter()
        .filter(|c| {
            !(c.classid == pg_sys::ExtensionRelationId.to_u32()
                && Some(c.objid) == pubjson.map(|o| o.to_u32()))
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    let relations: Vec<pg_sys::Oid> = rows
        .iter()
        .filter_map(|c| changed_table(c.classid.into(), c.objid.into()))
        .collect();
    let mut tree: Vec<u32> = relations.iter().map(|o| o.to_u32()).collect();
    for &relid in &relations {
        if catalog::relkind(relid) == b'p' {
            tree.extend(partitions(relid).into_iter().map(|o| o.to_u32()));
        }
    }
    tree.sort_unstable();
    tree.dedup();
    let credential_command = rows
        .iter()
        .any(|c| c.tag.as_deref().is_some_and(sql_redact::is_credential_tag));
    Some(Event {
        objects: ddl::objects_json(&rows),
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
            Ok::<_, pgrx::spi::Error>((spi::text_bytes(&table, 1)?, spi::text_bytes(&table, 2)?))
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

fn prepare(client: &pgrx::spi::SpiClient<'_>, query: &str) -> &'static OwnedPreparedStatement {
    let plan = client
        .prepare(query, &[])
        .unwrap_or_else(|e| spi_failed(e))
        .keep();
    Box::leak(Box::new(plan))
}

fn spi_failed(e: pgrx::spi::Error) -> ! {
    error::internal(format!(
        "pubjson: DDL capture could not read the event's objects: {e}"
    ))
}

/// The table whose definition a command on this object changed: a table
/// itself, or an index's, a trigger's or a table constraint's table.
fn changed_table(classid: pg_sys::Oid, objid: pg_sys::Oid) -> Option<pg_sys::Oid> {
    if classid == pg_sys::RelationRelationId {
        return match catalog::relkind(objid) {
            b'r' | b'p' => Some(objid),
            b'i' | b'I' => catalog::index_table(objid),
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

/// What capture writes of the statement that ran (`current_query()`):
/// the text with every value that may be a credential replaced
/// ([`sql_redact::redact`]; all of them when `credential_command`), at
/// most [`ddl::COMMAND_CHARS`] characters of it.
fn current_statement(credential_command: bool) -> CommandShown {
    if COMMAND_TEXT.get() == CommandText::None {
        return CommandShown::Withheld;
    }
    session::with_current_query(|query| {
        let Some(query) = query else {
            return CommandShown::NoStatement;
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
        let kept = clip_chars(&shown.text, ddl::COMMAND_CHARS);
        CommandShown::Text {
            truncated: kept < shown.text.len(),
            text: shown.text[..kept].to_vec(),
            redacted: shown.redacted,
        }
    })
}
