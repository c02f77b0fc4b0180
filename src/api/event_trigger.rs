//! The event triggers' function, `pubjson._ddl_event()`: a callback shim,
//! as the output plugin's are (`plugin/callbacks.rs`): PostgreSQL calls it
//! with its call information, which becomes a safe handle
//! (`pg::event_trigger::Fired`) once, and DDL capture (`ddl_capture.rs`)
//! does the rest.

use pgrx::prelude::*;

use crate::pg::event_trigger::Fired;

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
    // SAFETY: fcinfo is this call's own: pgrx's wrapper passes it through.
    let fired = unsafe { Fired::of_call(fcinfo) };
    super::ddl_capture::capture(fired);
}
