//! A decoded heap tuple as [`TupleValues`]: deformed once, each value read
//! along its column's [`ReadPlan`] as a [`Value`] that borrows the tuple's
//! bytes (or its output function's text) in place. The formats encode it.

use std::ffi::CStr;

use pgrx::pg_sys;

use crate::pg::columns::{ArrayElement, ColumnOutput, ColumnPlans, ReadPlan};
use crate::pg::handles::{Rel, SlotRow, Tuple};
use crate::pg::port::{is_external_ondisk, varlena_bytes};
use pubjson_core::model::{
    ArrayRef, ArrayValues, Cell, CellValue, ColumnMeta, Image, RelationMeta, TupleValues, Value,
};

/// Reusable `heap_deform_tuple` buffers.
#[derive(Default)]
pub struct DeformBuffers {
    values: Vec<pg_sys::Datum>,
    nulls: Vec<bool>,
}

/// The values of one row, in the layout of the relation `plans` were made
/// for.
pub struct DeformedTuple<'a> {
    values: &'a [pg_sys::Datum],
    nulls: &'a [bool],
    /// The row's relation's `outputs` and `varlena`, borrowed
    /// once per row (every value's check reads them).
    outputs: &'a [Option<ColumnOutput>],
    varlena: &'a [bool],
    /// Published columns by attribute index (publication column lists).
    mask: Option<&'a [bool]>,
}

/// Where the rows of a change come from.
#[derive(Clone, Copy)]
pub enum Row<'a> {
    Absent,
    /// The decoded tuple itself, in its relation's layout: a change's
    /// tuple and that change's relation.
    Heap(Rel<'a>, Tuple<'a>),
    /// A slot, possibly converted to an ancestor's layout (publications).
    Slot(SlotRow<'a>),
}

impl<'a> Row<'a> {
    pub fn is_present(self) -> bool {
        !matches!(self, Row::Absent)
    }
}

impl DeformBuffers {
    /// What a new row of `pubjson.backfill_progress` (`meta`, `plans`) records: the
    /// relation it is about and the SHA-256 of its chunk's message
    /// (`pubjson_core::protocol::backfill`); `None` without a digest.
    pub fn backfill_digest(
        &mut self,
        rel: Rel<'_>,
        tuple: Tuple<'_>,
        meta: &RelationMeta,
        plans: &ColumnPlans,
    ) -> Option<(u32, [u8; 32])> {
        let column = |name: &[u8]| {
            meta.columns
                .iter()
                .find(|c| c.name_json.get(1..c.name_json.len() - 1) == Some(name))
        };
        let (relid, digest) = (column(b"relid")?, column(b"digest")?);
        let row = self.deform(rel, tuple, plans, None);
        let relid = match row.image(relid)? {
            Image::Word(word) => word as u32,
            Image::Bytes(_) => return None,
        };
        match row.image(digest)? {
            Image::Bytes(bytes) => Some((relid, bytes.try_into().ok()?)),
            Image::Word(_) => None,
        }
    }

    /// The values of `row` for the formats (`None` when it is absent).
    /// `plans` are those of the row's layout: the tuple's relation, or the
    /// relation a slot's row was converted to.
    pub fn load<'a>(
        &'a mut self,
        row: Row<'a>,
        plans: &'a ColumnPlans,
        mask: Option<&'a [bool]>,
    ) -> Option<DeformedTuple<'a>> {
        match row {
            Row::Absent => None,
            Row::Heap(rel, tuple) => Some(self.deform(rel, tuple, plans, mask)),
            Row::Slot(slot) => Some(Self::load_slot(slot, plans, mask)),
        }
    }

    /// Deforms a change's `tuple` with its relation's descriptor.
    fn deform<'a>(
        &'a mut self,
        rel: Rel<'a>,
        tuple: Tuple<'a>,
        plans: &'a ColumnPlans,
        mask: Option<&'a [bool]>,
    ) -> DeformedTuple<'a> {
        // SAFETY: `rel` is an open relation and `tuple` a valid heap tuple
        // of it (handles, paired by Row::Heap); the buffers are sized to
        // the descriptor's attribute count before heap_deform_tuple fills them.
        unsafe {
            let tupdesc = (*rel.as_ptr()).rd_att;
            let natts = (*tupdesc).natts as usize;
            self.values.clear();
            self.values.resize(natts, pg_sys::Datum::from(0));
            self.nulls.clear();
            self.nulls.resize(natts, true);
            pg_sys::heap_deform_tuple(
                tuple.as_ptr(),
                tupdesc,
                self.values.as_mut_ptr(),
                self.nulls.as_mut_ptr(),
            );
        }
        DeformedTuple::new(&self.values, &self.nulls, plans, mask)
    }

    /// The values of a slot (all attributes deformed), read in place.
    fn load_slot<'a>(
        slot: SlotRow<'a>,
        plans: &'a ColumnPlans,
        mask: Option<&'a [bool]>,
    ) -> DeformedTuple<'a> {
        let slot = slot.as_ptr();
        // SAFETY: a SlotRow holds a tuple and stays unchanged for 'a (its
        // invariant); slot_getallattrs fills tts_values/tts_isnull for
        // every attribute of the slot's descriptor.
        let (values, nulls) = unsafe {
            pg_sys::slot_getallattrs(slot);
            let natts = (*(*slot).tts_tupleDescriptor).natts as usize;
            (
                std::slice::from_raw_parts((*slot).tts_values, natts),
                std::slice::from_raw_parts((*slot).tts_isnull, natts),
            )
        };
        DeformedTuple::new(values, nulls, plans, mask)
    }
}

/// A value that can be read along its plan: non-null, not an unchanged
/// TOAST pointer, of the type `plan` and `finfo` were made for, and valid
/// for `'a`. Made only by [`DeformedTuple::datum`] and
/// [`Elements::datum`], which check this.
#[derive(Clone, Copy)]
struct PlannedDatum<'a> {
    datum: pg_sys::Datum,
    plan: &'a ReadPlan,
    finfo: &'a pg_sys::FmgrInfo,
    is_varlena: bool,
}

impl<'a> PlannedDatum<'a> {
    /// The value; an array ([`ReadPlan::Array`]) is `array`.
    fn value(self, array: impl FnOnce() -> Value<'a>) -> Value<'a> {
        let datum = self.datum;
        let raw = datum.value();
        // SAFETY (each varlena_bytes): the plan was chosen for the datum's
        // type, so these are non-null varlenas of that type that are not
        // unchanged TOAST pointers (the type's invariant), valid for 'a.
        match self.plan {
            ReadPlan::Int2 => Value::Int(raw as i16 as i64),
            ReadPlan::Int4 => Value::Int(raw as i32 as i64),
            ReadPlan::Int8 => Value::Int(raw as i64),
            ReadPlan::Oid => Value::Int(raw as u32 as i64),
            ReadPlan::Bool => Value::Bool(raw & 0xff != 0),
            ReadPlan::Timestamp => Value::Timestamp(raw as i64),
            ReadPlan::TimestampTz => Value::TimestampTz(raw as i64),
            ReadPlan::Date => Value::Date(raw as i32),
            ReadPlan::Interval => {
                // SAFETY: a non-null interval datum points to an Interval.
                let interval = unsafe { &*datum.cast_mut_ptr::<pg_sys::Interval>() };
                Value::Interval {
                    months: interval.month,
                    days: interval.day,
                    micros: interval.time,
                }
            }
            ReadPlan::Numeric => Value::Numeric(unsafe { varlena_bytes(datum) }),
            ReadPlan::Text => Value::Text(unsafe { varlena_bytes(datum) }),
            ReadPlan::Json => Value::Json(unsafe { varlena_bytes(datum) }),
            ReadPlan::Jsonb => Value::Jsonb(unsafe { varlena_bytes(datum) }),
            ReadPlan::Bytea => Value::Bytea(unsafe { varlena_bytes(datum) }),
            ReadPlan::Float => Value::Float(self.text()),
            ReadPlan::Array(_) => array(),
            ReadPlan::OutputFunction => Value::OutputText(self.text()),
        }
    }

    /// The output function's text (palloc'd in the current memory context,
    /// which outlives the change). A varlena is detoasted first, as
    /// wal2json does.
    fn text(self) -> &'a [u8] {
        // SAFETY: a non-null value of the type `finfo` outputs (the type's
        // invariant); OutputFunctionCall changes the FmgrInfo only in its
        // own fn_extra cache, and returns a NUL-terminated string.
        unsafe {
            let value = if self.is_varlena {
                pg_sys::Datum::from(pg_sys::pg_detoast_datum(self.datum.cast_mut_ptr()))
            } else {
                self.datum
            };
            let finfo = self.finfo as *const pg_sys::FmgrInfo as *mut pg_sys::FmgrInfo;
            CStr::from_ptr(pg_sys::OutputFunctionCall(finfo, value)).to_bytes()
        }
    }
}

impl<'t> DeformedTuple<'t> {
    fn new(
        values: &'t [pg_sys::Datum],
        nulls: &'t [bool],
        plans: &'t ColumnPlans,
        mask: Option<&'t [bool]>,
    ) -> Self {
        DeformedTuple {
            values,
            nulls,
            outputs: &plans.outputs,
            varlena: &plans.varlena,
            mask,
        }
    }

    /// How the column at `i` is read: from the row's own relation entry
    /// (never from a caller's column), so what is read always matches the
    /// row's layout. `None` for dropped and system columns.
    fn output(&self, i: usize) -> Option<&'t ColumnOutput> {
        self.outputs.get(i)?.as_ref()
    }

    /// Whether the datum at `i` is an unchanged TOAST pointer (only a
    /// non-null varlena of the row's own layout can be one).
    fn is_toast_pointer(&self, i: usize) -> bool {
        // SAFETY: the non-null datum of a varlena attribute of the row's
        // layout (both checked first) is a varlena pointer.
        self.varlena.get(i) == Some(&true)
            && !self.nulls[i]
            && unsafe { is_external_ondisk(self.values[i]) }
    }

    /// The column's value ready to read; `None` for NULL, an unchanged
    /// TOAST value or a column the relation does not have.
    fn datum(&self, column: &ColumnMeta) -> Option<PlannedDatum<'_>> {
        let i = column.attr_index;
        let output = self.output(i)?;
        if *self.nulls.get(i)? {
            return None;
        }
        if self.is_toast_pointer(i) {
            return None;
        }
        Some(PlannedDatum {
            datum: self.values[i],
            plan: &output.plan,
            finfo: &output.finfo,
            is_varlena: output.is_varlena,
        })
    }
}

/// The elements of one array value (`deconstruct_array`'s result).
struct Elements<'a> {
    dims: Vec<usize>,
    default_bounds: bool,
    values: &'a [pg_sys::Datum],
    nulls: &'a [bool],
    element: &'a ArrayElement,
}

impl Elements<'_> {
    fn datum(&self, i: usize) -> Option<PlannedDatum<'_>> {
        match (self.values.get(i), self.nulls.get(i)) {
            // Elements are inline in the detoasted array: never TOAST pointers.
            (Some(&datum), Some(false)) => Some(PlannedDatum {
                datum,
                plan: &self.element.plan,
                finfo: &self.element.finfo,
                is_varlena: self.element.typlen == -1,
            }),
            _ => None,
        }
    }
}

impl ArrayValues for Elements<'_> {
    fn dims(&self) -> &[usize] {
        &self.dims
    }

    fn default_bounds(&self) -> bool {
        self.default_bounds
    }

    fn element(&self, i: usize) -> Option<Value<'_>> {
        // An element's plan is never an array (arrays of arrays are
        // multidimensional arrays).
        let datum = self.datum(i)?;
        Some(datum.value(|| Value::OutputText(datum.text())))
    }

    fn element_text(&self, i: usize) -> &[u8] {
        self.datum(i).map_or(&[], PlannedDatum::text)
    }
}

impl TupleValues for DeformedTuple<'_> {
    fn value<'a>(&'a self, column: &'a ColumnMeta) -> Value<'a> {
        match self.datum(column) {
            Some(datum) => datum.value(|| Value::Array(ArrayRef::new(self, column))),
            // The formats ask only for values (`cell` is `Value`).
            None => Value::OutputText(&[]),
        }
    }

    fn read<'a>(&'a self, column: &'a ColumnMeta) -> CellValue<'a> {
        let i = column.attr_index;
        if !self.is_visible(column) {
            return CellValue::Hidden;
        }
        if self.nulls[i] {
            return CellValue::Null;
        }
        if self.is_toast_pointer(i) {
            return CellValue::UnchangedToast;
        }
        // `value`, without checking again what was checked above.
        CellValue::Value(match self.output(i) {
            Some(output) => PlannedDatum {
                datum: self.values[i],
                plan: &output.plan,
                finfo: &output.finfo,
                is_varlena: output.is_varlena,
            }
            .value(|| Value::Array(ArrayRef::new(self, column))),
            None => Value::OutputText(&[]),
        })
    }

    fn text(&self, column: &ColumnMeta) -> &[u8] {
        self.datum(column).map_or(&[], PlannedDatum::text)
    }

    fn read_array(&self, column: &ColumnMeta, visit: &mut dyn FnMut(&dyn ArrayValues)) {
        let Some(datum) = self.datum(column) else {
            return;
        };
        let ReadPlan::Array(element) = datum.plan else {
            return;
        };
        // SAFETY: a non-null array of `element`'s type (PlannedDatum's
        // invariant), detoasted: ARR_DIMS and ARR_LBOUND follow the
        // ArrayType header (ndim ints each); deconstruct_array reads the
        // elements with the element type's storage properties and
        // returns `count` values and nulls, palloc'd in the current
        // memory context (which outlives the change).
        unsafe {
            let array =
                pg_sys::pg_detoast_datum(datum.datum.cast_mut_ptr()) as *mut pg_sys::ArrayType;
            let ndim = (*array).ndim.max(0) as usize;
            let dims_at =
                (array as *const u8).add(std::mem::size_of::<pg_sys::ArrayType>()) as *const i32;
            let dims = std::slice::from_raw_parts(dims_at, ndim);
            let lower_bounds = std::slice::from_raw_parts(dims_at.add(ndim), ndim);
            let dims: Vec<usize> = dims.iter().map(|&d| d.max(0) as usize).collect();
            if lower_bounds.iter().any(|&b| b != 1) {
                visit(&Elements {
                    dims,
                    default_bounds: false,
                    values: &[],
                    nulls: &[],
                    element,
                });
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
            visit(&Elements {
                dims,
                default_bounds: true,
                values,
                nulls,
                element,
            });
        }
    }

    fn image(&self, column: &ColumnMeta) -> Option<Image<'_>> {
        let i = column.attr_index;
        let output = self.output(i)?;
        if self.nulls[i] {
            return None;
        }
        let datum = self.values[i];
        if output.byval {
            return Some(Image::Word(datum.value() as u64));
        }
        // SAFETY: a non-null pass-by-reference datum of the row's own
        // attribute points to its value: a varlena (detoasted by
        // varlena_bytes, unless it is an unchanged TOAST pointer, which has
        // no value here), a NUL-terminated string (attlen -2) or attlen
        // bytes. The tuple outlives the borrow.
        unsafe {
            match output.attlen {
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
        self.is_toast_pointer(column.attr_index)
    }

    fn cell(&self, column: &ColumnMeta) -> Cell {
        let i = column.attr_index;
        if !self.is_visible(column) {
            return Cell::Hidden;
        }
        if self.nulls[i] {
            return Cell::Null;
        }
        if self.is_toast_pointer(i) {
            return Cell::UnchangedToast;
        }
        Cell::Value
    }
}
