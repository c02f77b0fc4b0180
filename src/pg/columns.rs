//! How each column's values are read: one plan per column
//! ([`ReadPlan`]), chosen once from its type, the format's
//! [`ValueReads`] and the session's date settings, with its output
//! function ([`ColumnOutput`]); the relation cache keeps them
//! ([`ColumnPlans`]) and the tuple reader (`tuple.rs`) reads along them.

use std::ffi::CStr;

use pgrx::pg_sys;

use crate::pg::handles::InCallback;
use pubjson_core::model::ValueReads;

/// How a column's values are read ([`Value`](pubjson_core::model::Value)): one plan per column, chosen
/// once from its type, the format's [`ValueReads`] and the session's
/// DateStyle and TimeZone.
pub enum ReadPlan {
    Int2,
    Int4,
    Int8,
    Oid,
    Bool,
    /// float4, float8: the output function's digits.
    Float,
    /// numeric: its on-disk digits.
    Numeric,
    /// text, varchar, bpchar: the bytes are the output function's text.
    Text,
    Json,
    /// jsonb: its on-disk format.
    Jsonb,
    Bytea,
    Timestamp,
    TimestampTz,
    Date,
    Interval,
    /// An array: its elements are read one by one.
    Array(Box<ArrayElement>),
    /// Any other type: the output function's text.
    OutputFunction,
}

/// What reading an array's elements takes.
pub struct ArrayElement {
    pub elem_type: pg_sys::Oid,
    pub typlen: i16,
    pub byval: bool,
    pub align: std::ffi::c_char,
    /// Never `Array` (arrays of arrays are multidimensional arrays).
    pub plan: ReadPlan,
    /// The element type's output function.
    pub finfo: Box<pg_sys::FmgrInfo>,
}

impl ReadPlan {
    /// The plan for values of `typid` (an array's elements when `nested`).
    pub(in crate::pg) fn of(
        catalog: InCallback<'_>,
        typid: pg_sys::Oid,
        reads: ValueReads,
        dates: DateSettings,
        memory: pg_sys::MemoryContext,
        nested: bool,
    ) -> ReadPlan {
        match reads {
            ValueReads::AsText => ReadPlan::as_text(typid, dates),
            ValueReads::Typed => ReadPlan::typed(catalog, typid, memory, nested),
        }
    }

    /// [`ValueReads::AsText`]: binary forms only where they print exactly
    /// as the type's own output function does in this session.
    fn as_text(typid: pg_sys::Oid, dates: DateSettings) -> ReadPlan {
        match typid {
            pg_sys::TIMESTAMPOID if dates.iso => ReadPlan::Timestamp,
            pg_sys::TIMESTAMPTZOID if dates.iso && dates.utc => ReadPlan::TimestampTz,
            pg_sys::INT2OID => ReadPlan::Int2,
            pg_sys::INT4OID => ReadPlan::Int4,
            pg_sys::INT8OID => ReadPlan::Int8,
            pg_sys::OIDOID => ReadPlan::Oid,
            pg_sys::BOOLOID => ReadPlan::Bool,
            pg_sys::TEXTOID | pg_sys::VARCHAROID | pg_sys::BPCHAROID => ReadPlan::Text,
            pg_sys::NUMERICOID => ReadPlan::Numeric,
            pg_sys::JSONBOID => ReadPlan::Jsonb,
            _ => ReadPlan::OutputFunction,
        }
    }

    /// [`ValueReads::Typed`]: domains as their base type, arrays element
    /// by element; `memory` is where element output functions live.
    fn typed(
        catalog: InCallback<'_>,
        typid: pg_sys::Oid,
        memory: pg_sys::MemoryContext,
        nested: bool,
    ) -> ReadPlan {
        // SAFETY: a catalog lookup, inside a decoding callback (`catalog`).
        let base = unsafe { pg_sys::getBaseType(typid) };
        match base {
            pg_sys::INT2OID => ReadPlan::Int2,
            pg_sys::INT4OID => ReadPlan::Int4,
            pg_sys::INT8OID => ReadPlan::Int8,
            pg_sys::OIDOID => ReadPlan::Oid,
            pg_sys::FLOAT4OID | pg_sys::FLOAT8OID => ReadPlan::Float,
            pg_sys::NUMERICOID => ReadPlan::Numeric,
            pg_sys::BOOLOID => ReadPlan::Bool,
            pg_sys::TEXTOID | pg_sys::VARCHAROID | pg_sys::BPCHAROID => ReadPlan::Text,
            pg_sys::JSONOID => ReadPlan::Json,
            pg_sys::JSONBOID => ReadPlan::Jsonb,
            pg_sys::BYTEAOID => ReadPlan::Bytea,
            pg_sys::TIMESTAMPOID => ReadPlan::Timestamp,
            pg_sys::TIMESTAMPTZOID => ReadPlan::TimestampTz,
            pg_sys::DATEOID => ReadPlan::Date,
            pg_sys::INTERVALOID => ReadPlan::Interval,
            _ if nested => ReadPlan::OutputFunction,
            _ => {
                // SAFETY: catalog lookups inside a decoding callback
                // (`catalog`); the output arguments are locals.
                let (elem_type, typlen, byval, align) = unsafe {
                    let elem_type = pg_sys::get_element_type(base);
                    if elem_type == pg_sys::InvalidOid || pg_sys::get_typlen(base) != -1 {
                        return ReadPlan::OutputFunction;
                    }
                    let mut typlen = 0i16;
                    let mut byval = false;
                    let mut align: std::ffi::c_char = 0;
                    pg_sys::get_typlenbyvalalign(elem_type, &mut typlen, &mut byval, &mut align);
                    (elem_type, typlen, byval, align)
                };
                ReadPlan::Array(Box::new(ArrayElement {
                    elem_type,
                    typlen,
                    byval,
                    align,
                    plan: ReadPlan::typed(catalog, elem_type, memory, true),
                    finfo: output_function(catalog, elem_type, memory),
                }))
            }
        }
    }
}

/// The output function of `typid`, resolved into `memory` (boxed so its
/// address is stable).
pub(in crate::pg) fn output_function(
    _catalog: InCallback<'_>,
    typid: pg_sys::Oid,
    memory: pg_sys::MemoryContext,
) -> Box<pg_sys::FmgrInfo> {
    let mut finfo = Box::new(pg_sys::FmgrInfo::default());
    // SAFETY: catalog lookups inside a decoding callback (`_catalog`);
    // `memory` is the relation cache's context, which outlives every entry
    // and so every plan holding the FmgrInfo.
    unsafe {
        let mut output_fn = pg_sys::InvalidOid;
        let mut is_varlena = false;
        pg_sys::getTypeOutputInfo(typid, &mut output_fn, &mut is_varlena);
        pg_sys::fmgr_info_cxt(output_fn, &mut *finfo, memory);
    }
    finfo
}

/// How one column is read, indexed by attribute number - 1.
pub struct ColumnOutput {
    pub plan: ReadPlan,
    /// The column's output function (of the base type with
    /// include-domain-data-type in format 1).
    pub finfo: Box<pg_sys::FmgrInfo>,
    /// The attribute's storage (`attlen`, `attbyval`): what its datum is.
    pub attlen: i16,
    pub byval: bool,
    /// `attlen = -1`.
    pub is_varlena: bool,
}

/// The session settings the timestamp fast path depends on.
#[derive(Debug, Clone, Copy)]
pub struct DateSettings {
    /// `DateStyle` is ISO.
    pub iso: bool,
    /// The session time zone has a constant zero offset.
    pub utc: bool,
}

impl DateSettings {
    /// Reads the decoding session's DateStyle and TimeZone.
    pub fn current() -> Self {
        // SAFETY: plain reads of GUC globals and the zone's name.
        unsafe {
            let iso = pg_sys::DateStyle == pg_sys::USE_ISO_DATES as i32;
            let name = pg_sys::pg_get_timezone_name(pg_sys::session_timezone);
            let utc = !name.is_null()
                && matches!(
                    CStr::from_ptr(name).to_bytes(),
                    b"UTC" | b"Etc/UTC" | b"Etc/Universal" | b"Universal" | b"Zulu" | b"Etc/Zulu"
                );
            DateSettings { iso, utc }
        }
    }
}

/// The read plans of one relation's columns, by attribute index.
pub struct ColumnPlans {
    /// `None` for dropped and system columns.
    pub outputs: Vec<Option<ColumnOutput>>,
    /// Whether its datum is a varlena (`attlen = -1`, never for a dropped
    /// or system column): `outputs[i].is_varlena`, packed, as the check of
    /// every value reads it.
    pub varlena: Vec<bool>,
}
