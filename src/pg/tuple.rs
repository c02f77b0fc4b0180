//! A decoded heap tuple as [`TupleValues`]: deformed once, values rendered
//! straight into the output buffer.

use std::ffi::CStr;

use pgrx::pg_sys;

use crate::output::datetime::push_iso_timestamp;
use crate::output::encoding::ServerEncoding;
use crate::output::json::{push_i64, push_json_string, push_u64};
use crate::output::jsonb::jsonb_json_string;
use crate::output::numeric::{numeric_text, NumericKind};

use crate::model::{Cell, ColumnMeta, EncodeError, Image, TupleValues};
use crate::output::v3::value::{push_array, push_value, Value};
use crate::output::wal2json::push_text_value;
use crate::pg::handles::{Rel, SlotRow, Tuple};
use crate::pg::port::{is_external_ondisk, varlena_bytes};
use crate::pg::relation::{ArrayElement, ColumnOutput, FastPath, RelationEntry, TypedPath};
use crate::pg::server_encoding::server_encoding;

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

/// Where the rows of a change come from.
#[derive(Clone, Copy)]
pub enum Row<'a> {
    Absent,
    /// The decoded tuple itself, in its relation's layout.
    Heap(Rel<'a>, Tuple<'a>),
    /// A slot, possibly converted to an ancestor's layout (publications).
    Slot(SlotRow<'a>),
}

impl<'a> Row<'a> {
    /// A decoded tuple of `rel`, `Absent` when there is none.
    pub fn heap(rel: Rel<'a>, tuple: Option<Tuple<'a>>) -> Row<'a> {
        match tuple {
            Some(tuple) => Row::Heap(rel, tuple),
            None => Row::Absent,
        }
    }

    pub fn is_present(self) -> bool {
        !matches!(self, Row::Absent)
    }
}

impl DeformBuffers {
    /// The values of `row` for the formats (`None` when it is absent).
    /// `entry` describes the row's layout: the tuple's relation, or the
    /// relation a slot's row was converted to.
    pub fn load<'a>(
        &'a mut self,
        row: Row<'a>,
        entry: &'a RelationEntry,
        mask: Option<&'a [bool]>,
    ) -> Option<DeformedTuple<'a>> {
        match row {
            Row::Absent => None,
            // SAFETY: a handle's tuple belongs to its open relation.
            Row::Heap(rel, tuple) => {
                Some(unsafe { self.deform(rel.as_ptr(), tuple.as_ptr(), entry, mask) })
            }
            // SAFETY: a SlotRow holds a tuple and stays unchanged while borrowed.
            Row::Slot(slot) => Some(unsafe { Self::load_slot(slot.as_ptr(), entry, mask) }),
        }
    }

    /// Deforms `tuple` with `rel`'s descriptor.
    ///
    /// # Safety
    /// `tuple` must be a valid heap tuple of `rel`, which must be open.
    unsafe fn deform<'a>(
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
    unsafe fn load_slot<'a>(
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

/// The output function's text of a non-null value.
///
/// # Safety
/// `datum` is a non-null value of the type `finfo` outputs; `is_varlena`
/// tells whether it is a varlena (detoasted first, as wal2json does). The
/// text lives in the current memory context.
unsafe fn output_text<'t>(
    finfo: &pg_sys::FmgrInfo,
    datum: pg_sys::Datum,
    is_varlena: bool,
) -> &'t [u8] {
    // SAFETY: per the contract; OutputFunctionCall does not modify finfo
    // beyond its own fn_extra cache, which it owns.
    unsafe {
        let value = if is_varlena {
            pg_sys::Datum::from(pg_sys::pg_detoast_datum(datum.cast_mut_ptr()))
        } else {
            datum
        };
        let finfo = finfo as *const pg_sys::FmgrInfo as *mut pg_sys::FmgrInfo;
        CStr::from_ptr(pg_sys::OutputFunctionCall(finfo, value)).to_bytes()
    }
}

/// JSON text to embed: marked for the ASCII rewrite of the output where
/// there is one (see `output::encoding`).
fn json_value(text: &[u8]) -> Value<'_> {
    if server_encoding() == ServerEncoding::Other {
        Value::JsonForAscii(text)
    } else {
        Value::Json(text)
    }
}

/// Format 3's typed JSON of a non-null value read along `path`.
///
/// # Safety
/// `datum` is a non-null value of the type `path` and `finfo` were made
/// for (`is_varlena`: its type is a varlena); it outlives this call.
unsafe fn write_typed_datum(
    path: &TypedPath,
    datum: pg_sys::Datum,
    finfo: &pg_sys::FmgrInfo,
    is_varlena: bool,
    numbers_as_strings: bool,
    out: &mut Vec<u8>,
) {
    let raw = datum.value();
    // SAFETY (every varlena_bytes below): the path was chosen for the
    // datum's type, a non-null varlena of that type.
    let value = match path {
        TypedPath::Int2 => Value::Int(raw as i16 as i64),
        TypedPath::Int4 => Value::Int(raw as i32 as i64),
        TypedPath::Int8 => Value::Int(raw as i64),
        TypedPath::Oid => Value::Int(raw as u32 as i64),
        TypedPath::Bool => Value::Bool(raw & 0xff != 0),
        TypedPath::Timestamp => Value::Timestamp(raw as i64),
        TypedPath::TimestampTz => Value::TimestampTz(raw as i64),
        TypedPath::Date => Value::Date(raw as i32),
        TypedPath::Interval => {
            // SAFETY: a non-null interval datum points to an Interval.
            let interval = unsafe { &*datum.cast_mut_ptr::<pg_sys::Interval>() };
            Value::Interval {
                months: interval.month,
                days: interval.day,
                micros: interval.time,
            }
        }
        TypedPath::Numeric => Value::Numeric(unsafe { varlena_bytes(datum) }),
        TypedPath::Text => Value::Text(unsafe { varlena_bytes(datum) }),
        TypedPath::Json => json_value(unsafe { varlena_bytes(datum) }),
        TypedPath::Jsonb => Value::Jsonb(unsafe { varlena_bytes(datum) }),
        TypedPath::Bytea => Value::Bytea(unsafe { varlena_bytes(datum) }),
        // SAFETY: per the contract.
        TypedPath::Float => Value::NumberText(unsafe { output_text(finfo, datum, is_varlena) }),
        TypedPath::OutputFunction => {
            // SAFETY: per the contract.
            Value::Text(unsafe { output_text(finfo, datum, is_varlena) })
        }
        TypedPath::Array(element) => {
            // SAFETY: per the contract: an array of `element`'s type.
            unsafe { write_array(element, datum, finfo, numbers_as_strings, out) };
            return;
        }
    };
    if push_value(out, value, numbers_as_strings).is_err() {
        // The binary form was not readable: the output function's text.
        // SAFETY: per the contract.
        let text = unsafe { output_text(finfo, datum, is_varlena) };
        let fallback = match path {
            TypedPath::Numeric => Value::NumberText(text),
            TypedPath::Jsonb => json_value(text),
            _ => Value::Text(text),
        };
        // Text forms are always written.
        let _ = push_value(out, fallback, numbers_as_strings);
    }
}

/// An array as nested JSON arrays; with lower bounds other than 1, its
/// text form (which shows them) as a string.
///
/// # Safety
/// `datum` is a non-null array of `element`'s type; `finfo` is the
/// array type's output function.
unsafe fn write_array(
    element: &ArrayElement,
    datum: pg_sys::Datum,
    finfo: &pg_sys::FmgrInfo,
    numbers_as_strings: bool,
    out: &mut Vec<u8>,
) {
    // SAFETY: a detoasted array: ARR_DIMS and ARR_LBOUND follow the
    // ArrayType header (ndim ints each); deconstruct_array reads the
    // elements with the element type's storage properties.
    unsafe {
        let array = pg_sys::pg_detoast_datum(datum.cast_mut_ptr()) as *mut pg_sys::ArrayType;
        let ndim = (*array).ndim.max(0) as usize;
        let dims_at =
            (array as *const u8).add(std::mem::size_of::<pg_sys::ArrayType>()) as *const i32;
        let dims = std::slice::from_raw_parts(dims_at, ndim);
        let lower_bounds = std::slice::from_raw_parts(dims_at.add(ndim), ndim);
        if lower_bounds.iter().any(|&b| b != 1) {
            let text = output_text(finfo, pg_sys::Datum::from(array), false);
            push_json_string(out, text);
            return;
        }
        let mut values: *mut pg_sys::Datum = std::ptr::null_mut();
        let mut nulls: *mut bool = std::ptr::null_mut();
        let mut count = 0i32;
        pg_sys::deconstruct_array(
            array,
            element.elem_type,
            element.typlen as i32,
            element.byval,
            element.align,
            &mut values,
            &mut nulls,
            &mut count,
        );
        let count = count.max(0) as usize;
        let (values, nulls): (&[pg_sys::Datum], &[bool]) = if count == 0 {
            (&[], &[])
        } else {
            (
                std::slice::from_raw_parts(values, count),
                std::slice::from_raw_parts(nulls, count),
            )
        };
        let dims: Vec<usize> = dims.iter().map(|&d| d.max(0) as usize).collect();
        let varlena_elements = element.typlen == -1;
        let _ = push_array(out, &dims, |out, i| -> Result<(), ()> {
            match (values.get(i), nulls.get(i)) {
                (Some(&value), Some(false)) => write_typed_datum(
                    &element.path,
                    value,
                    &element.finfo,
                    varlena_elements,
                    numbers_as_strings,
                    out,
                ),
                _ => out.extend_from_slice(b"null"),
            }
            Ok(())
        });
    }
}

impl TupleValues for DeformedTuple<'_> {
    fn write_typed(
        &mut self,
        column: &ColumnMeta,
        numbers_as_strings: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        let datum = self.values[column.attr_index];
        let Some(output) = self.entry.outputs[column.attr_index].as_ref() else {
            return Ok(());
        };
        let path = output.typed_path();
        // SAFETY: a non-null value (the formats ask only for those) of the
        // column's type, for which the path and output function were made.
        unsafe {
            write_typed_datum(
                path,
                datum,
                &output.finfo,
                column.is_varlena,
                numbers_as_strings,
                out,
            )
        };
        Ok(())
    }

    fn image(&self, column: &ColumnMeta) -> Option<Image<'_>> {
        let i = column.attr_index;
        if self.nulls[i] {
            return None;
        }
        let datum = self.values[i];
        if column.byval {
            return Some(Image::Word(datum.value() as u64));
        }
        // SAFETY: a non-null pass-by-reference datum points to its value:
        // a varlena (detoasted by varlena_bytes, unless it is an unchanged
        // TOAST pointer, which has no value here), a NUL-terminated string
        // (attlen -2) or attlen bytes. The tuple outlives the borrow.
        unsafe {
            match column.attlen {
                -1 if is_external_ondisk(datum) => None,
                -1 => Some(Image::Bytes(varlena_bytes(datum))),
                -2 => Some(Image::Bytes(
                    CStr::from_ptr(datum.cast_mut_ptr()).to_bytes(),
                )),
                len => Some(Image::Bytes(std::slice::from_raw_parts(
                    datum.cast_mut_ptr::<u8>(),
                    len.max(0) as usize,
                ))),
            }
        }
    }

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
