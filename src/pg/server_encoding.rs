//! The database encoding, and PostgreSQL's conversion of it to UTF-8 for
//! the output of databases that are not UTF-8 (see `text::encoding`).

use std::ffi::{CStr, CString};

use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

use crate::pg::error::Report;

use pubjson_core::text::encoding::{to_utf8_routine, ServerEncoding, ToUtf8};

/// The encoding of the database being decoded.
pub fn server_encoding() -> ServerEncoding {
    // SAFETY: GetDatabaseEncoding reads a variable set once at backend start.
    match unsafe { pg_sys::GetDatabaseEncoding() } as u32 {
        pg_sys::pg_enc::PG_UTF8 => ServerEncoding::Utf8,
        pg_sys::pg_enc::PG_SQL_ASCII => ServerEncoding::SqlAscii,
        _ => ServerEncoding::Other,
    }
}

/// A server-encoding-to-UTF-8 conversion function of PostgreSQL (the
/// signature of `CREATE CONVERSION` functions), or none for MULE_INTERNAL.
pub struct ServerToUtf8 {
    function: pg_sys::PGFunction,
    encoding: i32,
}

impl ServerToUtf8 {
    pub fn load() -> Self {
        // SAFETY: GetDatabaseEncoding/Name read state set at backend start;
        // the name is a static string.
        let (encoding, name) = unsafe {
            (
                pg_sys::GetDatabaseEncoding(),
                CStr::from_ptr(pg_sys::GetDatabaseEncodingName()).to_string_lossy(),
            )
        };
        let Some(routine) = to_utf8_routine(&name) else {
            // MULE_INTERNAL: no conversion to UTF-8 exists.
            return ServerToUtf8 {
                function: None,
                encoding,
            };
        };
        let (Ok(library), Ok(symbol)) =
            (CString::new(routine.library), CString::new(routine.symbol))
        else {
            unreachable!("routine names are constants without NUL bytes")
        };
        // SAFETY: two NUL-terminated strings; with signalNotFound = true a
        // missing library or symbol raises an ERROR instead of returning NULL.
        let address = unsafe {
            pg_sys::load_external_function(
                library.as_ptr(),
                symbol.as_ptr(),
                true,
                std::ptr::null_mut(),
            )
        };
        // SAFETY: the symbol is a conversion function, which PostgreSQL
        // itself calls through this type (fmgr's PGFunction).
        let function =
            unsafe { std::mem::transmute::<*mut std::ffi::c_void, pg_sys::PGFunction>(address) };
        if function.is_none() {
            Report::new(
                PgSqlErrorCode::ERRCODE_UNDEFINED_FUNCTION,
                format!(
                    "conversion function {} in {} not found",
                    routine.symbol, routine.library
                ),
            )
            .error();
        }
        ServerToUtf8 { function, encoding }
    }
}

impl ToUtf8 for ServerToUtf8 {
    fn convert(&mut self, src: &[u8], out: &mut Vec<u8>) -> usize {
        if self.function.is_none() || src.is_empty() {
            return 0;
        }
        let Ok(len) = i32::try_from(src.len()) else {
            return 0;
        };
        // A character grows at most fourfold (MAX_CONVERSION_GROWTH), plus
        // the terminating NUL the function writes.
        let start = out.len();
        out.resize(start + src.len() * 4 + 1, 0);
        // SAFETY: the conversion-function calling convention
        // (pg_do_encoding_conversion_buf): source encoding, UTF8, a source
        // of `len` bytes (not NUL-terminated; it holds no NUL: only bytes
        // >= 0x80), a destination with room for len * 4 + 1 bytes, and
        // noError = true, so invalid input stops the conversion instead of
        // raising an ERROR. It returns the number of source bytes converted
        // and NUL-terminates what it wrote.
        let converted = unsafe {
            let dest = out.as_mut_ptr().add(start);
            let result = pg_sys::DirectFunctionCall6Coll(
                self.function,
                pg_sys::InvalidOid,
                pg_sys::Datum::from(self.encoding),
                pg_sys::Datum::from(pg_sys::pg_enc::PG_UTF8 as i32),
                pg_sys::Datum::from(src.as_ptr()),
                pg_sys::Datum::from(dest),
                pg_sys::Datum::from(len),
                pg_sys::Datum::from(true),
            );
            let written = CStr::from_ptr(dest.cast()).to_bytes().len();
            out.truncate(start + written);
            result.value() as i32
        };
        usize::try_from(converted).unwrap_or(0).min(src.len())
    }
}

/// How many bytes of `text` (in the server's encoding) its first
/// `max_chars` characters take.
pub fn clip_chars(text: &[u8], max_chars: usize) -> usize {
    let len = i32::try_from(text.len()).unwrap_or(i32::MAX);
    let limit = i32::try_from(max_chars).unwrap_or(i32::MAX);
    // SAFETY: pg_mbcharcliplen reads at most `len` bytes of `text`, in the
    // server's encoding.
    let kept = unsafe { pg_sys::pg_mbcharcliplen(text.as_ptr().cast(), len, limit) };
    usize::try_from(kept).unwrap_or(0).min(text.len())
}
