//! PostgreSQL's raw parser, for DDL capture: where each statement of a
//! query string is and what kind of statement it is, as
//! [`pubjson_core::text::sql_redact`] needs it to decide what of the text may be
//! shown.

use std::ffi::CStr;

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgList;

use pubjson_core::text::sql_redact::{Statement, StatementKind};

/// The statements of `query` as the server's parser splits them, or
/// `None` when the text cannot be split for sure: it does not parse (now:
/// a setting changed since it ran), or `standard_conforming_strings` as it
/// was when the server parsed it (which a `SET` in the same string may
/// have changed since) would split it otherwise.
pub fn statements(query: &CStr) -> Option<Vec<Statement>> {
    let has_backslash = query.to_bytes().contains(&b'\\');
    // SAFETY: a plain global of the backend's lexer, read on its thread.
    let current = unsafe { pg_sys::standard_conforming_strings };
    let first = parse_with(query, current)?;
    if has_backslash && parse_with(query, !current)? != first {
        return None;
    }
    Some(first)
}

/// `raw_parser(query)` with `standard_conforming_strings` set to
/// `standard_strings`, in a memory context of its own; `None` on a syntax
/// error (caught: the raw parser only allocates, in that context, so
/// nothing is left to clean up but it).
fn parse_with(query: &CStr, standard_strings: bool) -> Option<Vec<Statement>> {
    // SAFETY: the lexer's settings are plain globals of this backend's
    // thread, read by scanner_init; both are put back below on every path
    // (the closure cannot unwind past `finally`).
    let saved = unsafe {
        let saved = (
            pg_sys::standard_conforming_strings,
            pg_sys::escape_string_warning,
        );
        pg_sys::standard_conforming_strings = standard_strings;
        // Reading the string again must not warn the client a second time.
        pg_sys::escape_string_warning = false;
        saved
    };
    // SAFETY: a child of the current context (a static name, as
    // AllocSetContextCreate requires), deleted below on every path.
    let (outer, context) = unsafe {
        let outer = pg_sys::CurrentMemoryContext;
        let context = pg_sys::AllocSetContextCreateInternal(
            outer,
            c"pubjson DDL capture parse".as_ptr(),
            pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        );
        (outer, context)
    };
    let len = query.to_bytes().len();
    let result = PgTryBuilder::new(|| {
        // SAFETY: `query` is NUL-terminated and outlives the call; the
        // parse tree is allocated in `context` and read before it goes.
        unsafe {
            pg_sys::MemoryContextSwitchTo(context);
            let list = pg_sys::raw_parser(query.as_ptr(), pg_sys::RawParseMode::RAW_PARSE_DEFAULT);
            pg_sys::MemoryContextSwitchTo(outer);
            Some(
                PgList::<pg_sys::RawStmt>::from_pg(list)
                    .iter_ptr()
                    .map(|raw| statement(&*raw, len))
                    .collect(),
            )
        }
    })
    .catch_others(|_| None)
    .finally(|| {
        // SAFETY: as above. A caught ERROR leaves CurrentMemoryContext at
        // `context` (where raw_parser was called): back to `outer` before
        // `context` goes.
        unsafe {
            pg_sys::standard_conforming_strings = saved.0;
            pg_sys::escape_string_warning = saved.1;
            pg_sys::MemoryContextSwitchTo(outer);
            pg_sys::MemoryContextDelete(context);
        }
    })
    .execute();
    result
}

/// One `RawStmt`: its bytes (`stmt_len` 0 means the rest of the string)
/// and its kind.
///
/// # Safety
/// `raw` is a RawStmt of a parse of a string of `len` bytes, its `stmt` a
/// valid node.
unsafe fn statement(raw: &pg_sys::RawStmt, len: usize) -> Statement {
    let start = usize::try_from(raw.stmt_location).unwrap_or(0).min(len);
    let end = match usize::try_from(raw.stmt_len) {
        Ok(0) | Err(_) => len,
        Ok(n) => start.saturating_add(n).min(len),
    };
    Statement {
        start,
        end,
        // SAFETY: the caller's promise.
        kind: unsafe { kind(raw.stmt) },
    }
}

/// What a parsed statement is, as far as its text may carry a
/// credential (the meaning of each kind: [`StatementKind`]). Every kind
/// not named here is [`StatementKind::Other`]: its values are replaced.
///
/// # Safety
/// `node` is a valid node of a raw parse tree.
unsafe fn kind(node: *mut pg_sys::Node) -> StatementKind {
    use pg_sys::NodeTag as T;
    if node.is_null() {
        return StatementKind::Other;
    }
    // SAFETY: every node starts with its tag.
    let tag = unsafe { (*node).type_ };
    match tag {
        T::T_AlterTableStmt => {
            // SAFETY: the tag says what the node is.
            let objtype = unsafe { (*(node as *mut pg_sys::AlterTableStmt)).objtype };
            if objtype == pg_sys::ObjectType::OBJECT_FOREIGN_TABLE {
                StatementKind::Credential
            } else {
                StatementKind::Catalog
            }
        }
        T::T_CreateStmt
        | T::T_IndexStmt
        | T::T_ViewStmt
        | T::T_CommentStmt
        | T::T_CreateSchemaStmt
        | T::T_CreateSeqStmt
        | T::T_AlterSeqStmt
        | T::T_DropStmt
        | T::T_RenameStmt
        | T::T_AlterObjectSchemaStmt
        | T::T_AlterOwnerStmt
        | T::T_AlterObjectDependsStmt
        | T::T_GrantStmt
        | T::T_GrantRoleStmt
        | T::T_AlterDefaultPrivilegesStmt
        | T::T_CreateDomainStmt
        | T::T_AlterDomainStmt
        | T::T_CreateEnumStmt
        | T::T_AlterEnumStmt
        | T::T_CompositeTypeStmt
        | T::T_CreateRangeStmt
        | T::T_DefineStmt
        | T::T_AlterTypeStmt
        | T::T_AlterOperatorStmt
        | T::T_CreateTrigStmt
        | T::T_CreatePolicyStmt
        | T::T_AlterPolicyStmt
        | T::T_CreatePublicationStmt
        | T::T_AlterPublicationStmt
        | T::T_CreateExtensionStmt
        | T::T_AlterExtensionStmt
        | T::T_AlterExtensionContentsStmt
        | T::T_RuleStmt
        | T::T_CreateStatsStmt
        | T::T_AlterStatsStmt
        | T::T_TruncateStmt
        | T::T_TransactionStmt
        | T::T_AlterFunctionStmt
        | T::T_CreateCastStmt
        | T::T_CreateOpClassStmt
        | T::T_CreateOpFamilyStmt
        | T::T_AlterOpFamilyStmt
        | T::T_CreateConversionStmt
        | T::T_CreateTransformStmt
        | T::T_CreateAmStmt
        | T::T_CreatePLangStmt
        | T::T_AlterTSDictionaryStmt
        | T::T_AlterTSConfigurationStmt
        | T::T_AlterCollationStmt
        | T::T_ReindexStmt
        | T::T_ClusterStmt
        | T::T_VacuumStmt
        | T::T_LockStmt
        | T::T_SecLabelStmt
        | T::T_CreateEventTrigStmt
        | T::T_AlterEventTrigStmt
        | T::T_RefreshMatViewStmt
        | T::T_AlterTableMoveAllStmt
        | T::T_DropOwnedStmt
        | T::T_ReassignOwnedStmt
        | T::T_DropUserMappingStmt
        | T::T_DropSubscriptionStmt => StatementKind::Catalog,
        T::T_CreateUserMappingStmt
        | T::T_AlterUserMappingStmt
        | T::T_CreateForeignServerStmt
        | T::T_AlterForeignServerStmt
        | T::T_CreateFdwStmt
        | T::T_AlterFdwStmt
        | T::T_CreateSubscriptionStmt
        | T::T_AlterSubscriptionStmt
        | T::T_CreateForeignTableStmt
        | T::T_ImportForeignSchemaStmt
        | T::T_CreateRoleStmt
        | T::T_AlterRoleStmt
        | T::T_AlterRoleSetStmt
        | T::T_AlterDatabaseSetStmt
        | T::T_AlterSystemStmt
        | T::T_VariableSetStmt => StatementKind::Credential,
        T::T_CreateFunctionStmt | T::T_DoStmt => StatementKind::Routine,
        _ => StatementKind::Other,
    }
}
