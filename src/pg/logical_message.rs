//! Writing a transactional logical message for the SQL side (DDL
//! capture).

use pgrx::pg_sys;
use pgrx::IntoDatum;

/// `pg_logical_emit_message(boolean, text, text[, boolean])`: the same OID
/// in 15 to 18 (17 added the last argument).
const EMIT_MESSAGE_TEXT: pg_sys::Oid = pg_sys::Oid::from_u32(3577);

/// `pg_logical_emit_message(true, prefix, content)`: in the current
/// transaction, decoded where it commits. Only for a role that may call
/// `pg_logical_emit_message` itself (an ERROR, 42501, otherwise): the
/// extension never writes to the WAL for a role what an administrator
/// revoked from it.
pub fn emit_transactional(prefix: &str, content: &[u8]) {
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
                prefix.into_datum(),
                content.into_datum(),
                false.into_datum(),
            ],
        );
    }
}
