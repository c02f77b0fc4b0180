//! The backend session the SQL functions run in: who runs them, the
//! statement the client sent, settings, and running code as another role.

use std::ffi::CStr;

use pgrx::pg_sys;

/// Runs `f` with the client's current statement (`current_query()`,
/// `None` outside a client's query: a background worker's), valid for the
/// call.
pub fn with_current_query<R>(f: impl FnOnce(Option<&CStr>) -> R) -> R {
    // SAFETY: debug_query_string is the backend's current query string or
    // NULL; it is not freed before the query ends, which outlasts `f`.
    let query = unsafe {
        let query = pg_sys::debug_query_string;
        (!query.is_null()).then(|| CStr::from_ptr(query))
    };
    f(query)
}

/// The current (sub)transaction's xid, 0 when it has none yet.
pub fn current_xid() -> u32 {
    // SAFETY: reads the current transaction state; assigns nothing.
    unsafe { pg_sys::GetCurrentTransactionIdIfAny() }.into_inner()
}

/// The current role's name (`current_user`), in the server's encoding.
pub fn current_user_name() -> Vec<u8> {
    // SAFETY: the current user exists (noerr = false raises an ERROR if it
    // does not); the name is a palloc'd C string, copied.
    unsafe {
        CStr::from_ptr(pg_sys::GetUserNameFromId(pg_sys::GetUserId(), false))
            .to_bytes()
            .to_vec()
    }
}

/// The session's `search_path` as `SHOW` prints it.
pub fn search_path() -> Vec<u8> {
    // SAFETY: search_path always exists; the value is a palloc'd C string,
    // copied.
    unsafe {
        let value =
            pg_sys::GetConfigOptionByName(c"search_path".as_ptr(), std::ptr::null_mut(), false);
        CStr::from_ptr(value).to_bytes().to_vec()
    }
}

/// Whether the current role is a superuser.
pub fn is_superuser() -> bool {
    // SAFETY: reads the current role's superuser flag from the syscache.
    unsafe { pg_sys::superuser() }
}

/// Runs `f` as `role` (as a SECURITY DEFINER function does), restoring the
/// caller afterwards; an ERROR inside restores it too (transaction abort
/// resets the user id).
pub fn as_role<R>(role: pg_sys::Oid, f: impl FnOnce() -> R) -> R {
    let mut caller = pg_sys::InvalidOid;
    let mut context = 0;
    // SAFETY: reads and sets the backend's current user id and security
    // context (plain globals); SECURITY_LOCAL_USERID_CHANGE is what
    // SECURITY DEFINER uses. A role that does not exist has no privileges.
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut caller, &mut context);
        pg_sys::SetUserIdAndSecContext(role, context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32);
    }
    let result = f();
    // SAFETY: as above, back to what was read.
    unsafe { pg_sys::SetUserIdAndSecContext(caller, context) };
    result
}

/// When the startup process last found new streamed WAL while caught up
/// (its `XLogReceiptTime` for streamed WAL, which it also stores in shared
/// memory: `SetCurrentChunkStartTime`); `None` when the server is not in
/// recovery or has replayed no streamed WAL yet.
pub fn streamed_wal_receipt_time() -> Option<i64> {
    // SAFETY: both read shared state under its own lock (the
    // XLogCtl/XLogRecoveryCtl info_lck spinlocks), which every backend
    // attached at startup; neither can raise an ERROR.
    let (in_recovery, chunk_start) = unsafe {
        (
            pg_sys::RecoveryInProgress(),
            pg_sys::GetCurrentChunkReplayStartTime(),
        )
    };
    // 0 is the initial value: no streamed chunk replayed since startup.
    (in_recovery && chunk_start != 0).then_some(chunk_start)
}
