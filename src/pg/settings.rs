//! Settings the extension's own queries run under, at a GUC nest level of
//! their own (as a function's `SET` clause does), so that a setting made
//! for one query never outlives it.
//!
//! The extension's internal queries (backfill's chunks, its catalog and
//! progress statements, DDL capture's kept plans) are never JIT-compiled:
//! they are catalog look-ups and key-ranged reads of at most a chunk's
//! rows, where compiling costs tens of milliseconds per query per call
//! (nothing keeps the compiled code between executions) and running them
//! well under one; JIT pays off only for long scans that evaluate many
//! expressions, which none of them is. PostgreSQL decides by the planner's
//! cost estimate (`jit_above_cost`), which a query's planner settings can
//! inflate far beyond its real cost (issue 42: backfill's `enable_sort =
//! off` made a 0.1 ms catalog query cost 10^10 and compile for 72 ms), so
//! the decision is made here, not left to the estimate. The SQL functions
//! of the extension say the same with `SET jit = off`.

use std::ffi::CStr;

use pgrx::pg_sys;

/// `jit = off`, for every internal query.
pub const NO_JIT: &[(&CStr, &CStr)] = &[(c"jit", c"off")];

/// Settings made at a GUC nest level of their own; [`Self::restore`] puts
/// the previous values back. An ERROR before that does too: the
/// (sub)transaction's abort pops the level.
#[must_use = "settings stay until restored"]
pub struct Settings(i32);

impl Settings {
    /// Sets each `(name, value)` (user-settable settings; an invalid value
    /// is an ERROR).
    pub fn set(settings: &[(&CStr, &CStr)]) -> Settings {
        // SAFETY: a new GUC nest level, popped by `restore` or by the
        // (sub)transaction's abort, as a function's SET clause does.
        let level = unsafe { pg_sys::NewGUCNestLevel() };
        for (name, value) in settings {
            // SAFETY: NUL-terminated strings that live across the call;
            // GUC_ACTION_SAVE records the old value at this nest level; an
            // invalid value raises an ERROR (elevel 0 means ERROR).
            unsafe {
                pg_sys::set_config_option(
                    name.as_ptr(),
                    value.as_ptr(),
                    pg_sys::GucContext::PGC_USERSET,
                    pg_sys::GucSource::PGC_S_SESSION,
                    pg_sys::GucAction::GUC_ACTION_SAVE,
                    true,
                    0,
                    false,
                )
            };
        }
        Settings(level)
    }

    /// Puts back the values from before [`Self::set`]. Levels opened
    /// inside this one must have been restored first.
    pub fn restore(self) {
        // SAFETY: the level `set` opened, still open (not popped by an
        // abort: this runs on the normal path only).
        unsafe { pg_sys::AtEOXact_GUC(true, self.0) };
    }
}

/// Runs `f` with [`NO_JIT`], the settings of every internal query.
pub fn without_jit<R>(f: impl FnOnce() -> R) -> R {
    let settings = Settings::set(NO_JIT);
    let result = f();
    settings.restore();
    result
}
