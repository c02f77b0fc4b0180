//! Values to and from SPI as the server's bytes: text columns (pgrx's
//! `String` refuses text that is not UTF-8, and the database's encoding
//! need not be), row images, bytea arguments.

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;

/// A text column of the current row of `table`, as its bytes in the
/// server's encoding.
pub fn text_bytes(
    table: &pgrx::spi::SpiTupleTable<'_>,
    ordinal: usize,
) -> Result<Option<Vec<u8>>, pgrx::spi::Error> {
    let Some(datum) = table.get_datum_by_ordinal(ordinal)? else {
        return Ok(None);
    };
    let typid = table.column_type_oid(ordinal)?.value();
    // SAFETY: a syscache lookup of the column's type.
    let varlena = unsafe { pg_sys::get_typlen(typid) == -1 };
    if !varlena {
        return Err(pgrx::spi::Error::DatumError(
            pgrx::datum::TryFromDatumError::IncompatibleTypes {
                rust_type: "text bytes",
                rust_oid: pg_sys::TEXTOID,
                datum_type: format!("{typid:?}"),
                datum_oid: typid,
            },
        ));
    }
    // SAFETY: a non-null varlena (its type's length is -1) in SPI's
    // memory, which lives until the connection ends; the bytes are copied.
    Ok(Some(unsafe {
        crate::pg::port::varlena_bytes(datum).to_vec()
    }))
}

/// `bytes` as a bytea argument of an SPI query, built in the current
/// memory context (one copy of a large message at a time: the Vec is freed
/// once copied).
pub fn bytea_argument(bytes: Vec<u8>) -> DatumWithOid<'static> {
    let len = bytes.len() + pg_sys::VARHDRSZ;
    if len > crate::pg::port::MAX_ALLOC_SIZE {
        crate::pg::error::internal("pubjson: a bytea value beyond the allocation limit");
    }
    // SAFETY: palloc of len bytes (below MaxAllocSize, checked); a 4-byte
    // varlena header is written, then the bytes; the datum is a bytea in
    // the current memory context, alive until it is reset (after the query
    // it is passed to).
    unsafe {
        let ptr = pg_sys::palloc(len) as *mut u8;
        pgrx::varlena::set_varsize_4b(ptr as *mut pg_sys::varlena, len as i32);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.add(pg_sys::VARHDRSZ), bytes.len());
        DatumWithOid::new(pg_sys::Datum::from(ptr), pg_sys::BYTEAOID)
    }
}

/// The bytes of a non-null row value (a composite datum of an SPI
/// result), detoasted, handed to `f`; `None` when `value` is not a row.
pub fn with_row_image<R>(value: &pgrx::AnyElement, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    // SAFETY: a type OID lookup in the syscache.
    let composite = unsafe { pg_sys::type_is_rowtype(value.oid()) };
    if !composite {
        return None;
    }
    let datum = value.datum();
    // SAFETY: a non-null composite datum (AnyElement holds a valid datum
    // of its type, checked to be a row type): a varlena. pg_detoast_datum
    // returns it untoasted with a 4-byte header, palloc'd in the current
    // context or in place, valid for `f`; VARSIZE bytes follow.
    let bytes = unsafe {
        let value = pg_sys::pg_detoast_datum(datum.cast_mut_ptr());
        let len = pgrx::varlena::varsize_any(value);
        std::slice::from_raw_parts(value as *const u8, len)
    };
    Some(f(bytes))
}
