//! An event trigger function's call, as a safe handle: which event fired
//! it and the command tag.

use std::ffi::CStr;

use pgrx::{pg_sys, PgSqlErrorCode};

use crate::pg::error::Report;

/// The event (`ddl_command_end`, `sql_drop`, ...) and the command's tag
/// (`CREATE TABLE`, ...) of the running event trigger.
pub struct Fired {
    pub event: Vec<u8>,
    pub tag: Vec<u8>,
}

impl Fired {
    /// The event trigger call `fcinfo` is; an ERROR (39P01) when the
    /// function was called some other way.
    ///
    /// # Safety
    /// `fcinfo` is the running function call's own (as pgrx passes it to a
    /// `#[pg_extern]` function).
    pub unsafe fn of_call(fcinfo: pg_sys::FunctionCallInfo) -> Fired {
        // SAFETY: the call's own fcinfo (the caller's contract); its
        // context is a Node when set, and an EventTriggerData exactly when
        // its tag says so (CALLED_AS_EVENT_TRIGGER), which PostgreSQL's
        // EventTriggerInvoke fills for the duration of the call; `event` is
        // a static C string and GetCommandTagName returns one for every
        // tag. Both are copied.
        unsafe {
            let context = (*fcinfo).context;
            if context.is_null() || (*context).type_ != pg_sys::NodeTag::T_EventTriggerData {
                Report::new(
                    PgSqlErrorCode::ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED,
                    "pubjson._ddl_event() can only be called as an event trigger",
                )
                .error();
            }
            let trigger = &*(context as *const pg_sys::EventTriggerData);
            Fired {
                event: CStr::from_ptr(trigger.event).to_bytes().to_vec(),
                tag: CStr::from_ptr(pg_sys::GetCommandTagName(trigger.tag))
                    .to_bytes()
                    .to_vec(),
            }
        }
    }
}
