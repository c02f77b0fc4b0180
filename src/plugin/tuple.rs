//! A decoded heap tuple as [`TupleValues`]: deformed once, values rendered
//! straight into the output buffer.

use std::ffi::CStr;

use pgrx::pg_sys;

use crate::output::datetime::push_iso_timestamp;
use crate::output::json::{push_i64, push_json_string, push_u64};
use crate::output::jsonb::jsonb_json_string;
use crate::output::numeric::{numeric_text, NumericKind};
use crate::output::wal2json::{push_text_value, Cell, ColumnMeta, EncodeError, TupleValues};
use crate::plugin::relation::{ColumnOutput, FastPath, RelationEntry};

/// Reusable `heap_deform_tuple` buffers.
#[derive(Default)]
pub struct DeformBuffers {
    values: Vec<pg_sys::Datum>,
    nulls: Vec<bool>,
}

pub struct DeformedTuple<'a> {
    values: &'a [pg_sys::Datum],
    nulls: &'a [bool],
    entry: &'a RelationEntry,
    /// Published columns by attribute index (publication column lists).
    mask: Option<&'a [bool]>,
}

impl DeformBuffers {
    /// Deforms `tuple` with `rel`'s descriptor.
    ///
    /// # Safety
    /// `tuple` must be a valid heap tuple of `rel`, which must be open.
    pub unsafe fn deform<'a>(
        &'a mut self,
        rel: pg_sys::Relation,
        tuple: pg_sys::HeapTuple,
        entry: &'a RelationEntry,
        mask: Option<&'a [bool]>,
    ) -> DeformedTuple<'a> {
        // SAFETY: the descriptor belongs to the open relation; the buffers
        // are sized to its attribute count before heap_deform_tuple fills them.
        unsafe {
            let tupdesc = (*rel).rd_att;
            let natts = (*tupdesc).natts as usize;
            self.values.clear();
            self.values.resize(natts, pg_sys::Datum::from(0));
            self.nulls.clear();
            self.nulls.resize(natts, true);
            pg_sys::heap_deform_tuple(
                tuple,
                tupdesc,
                self.values.as_mut_ptr(),
                self.nulls.as_mut_ptr(),
            );
        }
        DeformedTuple {
            values: &self.values,
            nulls: &self.nulls,
            entry,
            mask,
        }
    }

    /// The values of a slot (all attributes deformed), read in place.
    ///
    /// # Safety
    /// `slot` must hold a tuple with `entry`'s relation's layout and stay
    /// unchanged while the result is in use.
    pub unsafe fn load_slot<'a>(
        &'a mut self,
        slot: *mut pg_sys::TupleTableSlot,
        entry: &'a RelationEntry,
        mask: Option<&'a [bool]>,
    ) -> DeformedTuple<'a> {
        // SAFETY: slot_getallattrs fills tts_values/tts_isnull for every
        // attribute of the slot's descriptor; the caller keeps the slot as it is.
        let (values, nulls) = unsafe {
            pg_sys::slot_getallattrs(slot);
            let natts = (*(*slot).tts_tupleDescriptor).natts as usize;
            (
                std::slice::from_raw_parts((*slot).tts_values, natts),
                std::slice::from_raw_parts((*slot).tts_isnull, natts),
            )
        };
        DeformedTuple {
            values,
            nulls,
            entry,
            mask,
        }
    }
}

/// The attributes of a tuple descriptor, in order.
///
/// # Safety
/// `desc` is a valid tuple descriptor that outlives the slice.
pub unsafe fn tuple_desc_attrs<'a>(desc: pg_sys::TupleDesc) -> &'a [pg_sys::FormData_pg_attribute] {
    // SAFETY: the descriptor holds `natts` attributes in one array.
    unsafe {
        let natts = (*desc).natts as usize;
        #[cfg(not(feature = "pg18"))]
        let attrs = (*desc).attrs.as_slice(natts);
        // 18: the array follows the CompactAttribute array; TupleDescAttr()
        // knows where.
        #[cfg(feature = "pg18")]
        let attrs = if natts == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(pg_sys::TupleDescAttr(desc, 0), natts)
        };
        attrs
    }
}

/// `VARATT_IS_EXTERNAL_ONDISK`: a TOAST pointer the change does not carry.
///
/// # Safety
/// `datum` must point to a varlena.
pub unsafe fn is_external_ondisk(datum: pg_sys::Datum) -> bool {
    let p = datum.cast_mut_ptr::<pg_sys::varlena>();
    // SAFETY: per the contract, `p` is a varlena header.
    unsafe {
        pgrx::varlena::varatt_is_1b_e(p)
            && pgrx::varlena::vartag_external(p) == pg_sys::vartag_external::VARTAG_ONDISK as u8
    }
}

/// The bytes of a varlena value after its header: read in place when the
/// value is inline and uncompressed (almost always; also behind the
/// INDIRECT pointers logical decoding uses for reassembled TOAST values),
/// otherwise detoasted into a copy in the current, per-change, memory context.
///
/// # Safety
/// `datum` must be a non-null varlena value.
unsafe fn varlena_bytes<'a>(datum: pg_sys::Datum) -> &'a [u8] {
    let mut p = datum.cast_mut_ptr::<pg_sys::varlena>();
    // SAFETY: per the contract; pg_detoast_datum_packed() returns the value
    // itself in exactly the in-place case, so both branches agree, and its
    // copy lives until the per-change reset. An INDIRECT pointer's target
    // (a TOAST value the reorder buffer reassembled for this change) lives
    // until the change has been decoded.
    unsafe {
        use pgrx::varlena::{varatt_is_1b, varatt_is_1b_e, varatt_is_4b_u, vartag_external};
        if varatt_is_1b_e(p) && vartag_external(p) == pg_sys::vartag_external::VARTAG_INDIRECT as u8
        {
            // VARDATA_EXTERNAL: a (possibly unaligned) varatt_indirect.
            let indirect = (p as *const u8).add(2) as *const pg_sys::varatt_indirect;
            p = std::ptr::read_unaligned(indirect).pointer;
        }
        let in_place = varatt_is_4b_u(p) || (varatt_is_1b(p) && !varatt_is_1b_e(p));
        let value = if in_place {
            p
        } else {
            pg_sys::pg_detoast_datum_packed(p)
        };
        pgrx::varlena::varlena_to_byte_slice(value)
    }
}

fn push_number(out: &mut Vec<u8>, quoted: bool, write: impl FnOnce(&mut Vec<u8>)) {
    if quoted {
        out.push(b'"');
    }
    write(out);
    if quoted {
        out.push(b'"');
    }
}

impl DeformedTuple<'_> {
    /// The type's output function, then wal2json's encoding of its text.
    fn write_with_output_function(
        &self,
        column: &ColumnMeta,
        output: &ColumnOutput,
        datum: pg_sys::Datum,
        numbers_as_strings: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        // SAFETY: the output function was resolved for this column's type;
        // varlena values are detoasted first, as wal2json does.
        let text = unsafe {
            let value = if column.is_varlena {
                pg_sys::Datum::from(pg_sys::pg_detoast_datum(datum.cast_mut_ptr()))
            } else {
                datum
            };
            let finfo = &*output.finfo as *const pg_sys::FmgrInfo as *mut pg_sys::FmgrInfo;
            CStr::from_ptr(pg_sys::OutputFunctionCall(finfo, value))
        };
        push_text_value(out, column.kind, text.to_bytes(), numbers_as_strings)
    }
}

impl TupleValues for DeformedTuple<'_> {
    fn is_visible(&self, column: &ColumnMeta) -> bool {
        self.mask
            .is_none_or(|m| m.get(column.attr_index).copied().unwrap_or(false))
    }

    fn is_null(&self, column: &ColumnMeta) -> bool {
        self.nulls[column.attr_index]
    }

    fn is_unchanged_toast(&self, column: &ColumnMeta) -> bool {
        let i = column.attr_index;
        // SAFETY: the datum of a non-null varlena column is a varlena
        // pointer (a NULL column's datum is 0: checked first).
        column.is_varlena && !self.nulls[i] && unsafe { is_external_ondisk(self.values[i]) }
    }

    fn cell(&self, column: &ColumnMeta) -> Cell {
        let i = column.attr_index;
        if !self.is_visible(column) {
            return Cell::Hidden;
        }
        if self.nulls[i] {
            return Cell::Null;
        }
        // SAFETY: a non-null varlena column holds a varlena pointer.
        if column.is_varlena && unsafe { is_external_ondisk(self.values[i]) } {
            return Cell::UnchangedToast;
        }
        Cell::Value
    }

    fn write_value(
        &mut self,
        column: &ColumnMeta,
        numbers_as_strings: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        let datum = self.values[column.attr_index];
        let Some(output) = self.entry.outputs[column.attr_index].as_ref() else {
            return Ok(());
        };
        let raw = datum.value();
        // The fast paths print exactly what int2out/int4out/int8out/oidout/
        // boolout/textout print, without an fmgr call and a palloc'd string.
        match output.fast_path {
            FastPath::Int2 => {
                push_number(out, numbers_as_strings, |o| push_i64(o, raw as i16 as i64))
            }
            FastPath::Int4 => {
                push_number(out, numbers_as_strings, |o| push_i64(o, raw as i32 as i64))
            }
            FastPath::Int8 => push_number(out, numbers_as_strings, |o| push_i64(o, raw as i64)),
            FastPath::Oid => {
                push_number(out, numbers_as_strings, |o| push_u64(o, raw as u32 as u64))
            }
            FastPath::Bool => {
                out.extend_from_slice(if raw & 0xff != 0 { b"true" } else { b"false" })
            }
            FastPath::Text => {
                // SAFETY: a non-null text/varchar/bpchar datum.
                push_json_string(out, unsafe { varlena_bytes(datum) });
            }
            FastPath::Numeric => {
                // SAFETY: a non-null numeric datum.
                let body = unsafe { varlena_bytes(datum) };
                // Written in place; wal2json's rules then quote it or turn
                // NaN/Infinity into null.
                let start = out.len();
                if numbers_as_strings {
                    out.push(b'"');
                }
                match numeric_text(body, out) {
                    None => {
                        out.truncate(start);
                        self.write_with_output_function(
                            column,
                            output,
                            datum,
                            numbers_as_strings,
                            out,
                        )?;
                    }
                    Some(_) if numbers_as_strings => out.push(b'"'),
                    Some(NumericKind::Special) => {
                        out.truncate(start);
                        out.extend_from_slice(b"null");
                    }
                    Some(NumericKind::Finite) => {}
                }
            }
            FastPath::Jsonb => {
                // SAFETY: a non-null jsonb datum.
                let body = unsafe { varlena_bytes(datum) };
                if !jsonb_json_string(body, out) {
                    self.write_with_output_function(
                        column,
                        output,
                        datum,
                        numbers_as_strings,
                        out,
                    )?;
                }
            }
            FastPath::Timestamp { utc } => {
                out.push(b'"');
                if !push_iso_timestamp(out, raw as i64, utc) {
                    out.pop();
                    self.write_with_output_function(
                        column,
                        output,
                        datum,
                        numbers_as_strings,
                        out,
                    )?;
                } else {
                    out.push(b'"');
                }
            }
            FastPath::OutputFunction => {
                self.write_with_output_function(column, output, datum, numbers_as_strings, out)?;
            }
        }
        Ok(())
    }
}
