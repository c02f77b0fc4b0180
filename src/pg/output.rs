//! The bytes path: the output the formats write ([`OutputBuffer`], the
//! formats' [`Sink`]), rewritten as ASCII where the database is not UTF-8
//! ([`OutputText`]), handed to PostgreSQL through the decoding context
//! ([`Writer`]: the SQL functions' writer is lent the buffer itself, a
//! walsender's gets a copy after its header), and counted.

use std::marker::PhantomData;
use std::ptr::NonNull;

use pgrx::pg_sys;

use crate::pg::port::{append_to_string_info, MAX_ALLOC_SIZE};
use crate::pg::server_encoding::{server_encoding, ServerToUtf8};
use pubjson_core::output::format::Sink;
use pubjson_core::text::encoding::{push_ascii_json, ServerEncoding};

/// The decoding context, for writing output and reporting progress.
///
/// Construction invariant: `ctx` is the decoding context of the running
/// callback, valid for `'a`, and only this writer writes through it
/// meanwhile.
pub struct Writer<'a> {
    ctx: NonNull<pg_sys::LogicalDecodingContext>,
    _call: PhantomData<&'a mut pg_sys::LogicalDecodingContext>,
}

impl<'a> Writer<'a> {
    /// # Safety
    /// `ctx` is the decoding context of the running callback, valid for `'a`
    /// (`'a` ends before the callback returns), and nothing else writes
    /// through it meanwhile.
    pub unsafe fn new(ctx: *mut pg_sys::LogicalDecodingContext) -> Self {
        Writer {
            // SAFETY: logical.c passes every callback its LogicalDecodingContext,
            // never NULL (the caller's contract: it is that context).
            ctx: unsafe { NonNull::new_unchecked(ctx) },
            _call: PhantomData,
        }
    }

    /// Hands `message` to PostgreSQL as one write (`last`: the end of an
    /// output message). Where the write callback takes the message alone
    /// (the SQL functions'), it reads it from `message` itself, which is
    /// lent to `ctx->out` for the call: a copy fewer of every byte (3% of a
    /// format 3 peek). A walsender's write starts with its own header, so
    /// the message is copied after it.
    pub fn write(&mut self, message: &mut Vec<u8>, last: bool) {
        let ctx = self.ctx.as_ptr();
        // SAFETY: the prepare/write sequence of every output plugin, on the
        // running callback's context (construction invariant), which only
        // this writer writes through (`&mut self`); ctx->out is the
        // StringInfo OutputPluginPrepareWrite has just reset, valid until
        // OutputPluginWrite hands it on. Left empty, it belongs to a writer
        // that hands on exactly what is appended: the SQL functions'
        // (LogicalOutputPrepareWrite), whose LogicalOutputWrite only reads
        // it, as LentStringInfo requires; the walsender's writes its header
        // first and takes the copy.
        unsafe {
            pg_sys::OutputPluginPrepareWrite(ctx, last);
            let out = (*ctx).out;
            // Held until the write has returned (or unwound).
            let _lent = if (*out).len == 0 && message.len() < MAX_ALLOC_SIZE {
                Some(LentStringInfo::new(out, message))
            } else {
                append_to_string_info(out, message);
                None
            };
            pg_sys::OutputPluginWrite(ctx, last);
        }
    }

    /// [`Self::write`] (as the end of a message) reported at `lsn`.
    pub fn write_at(&mut self, message: &mut Vec<u8>, lsn: u64) {
        let ctx = self.ctx.as_ptr();
        // SAFETY: write_location is a plain XLogRecPtr field of the running
        // callback's context (construction invariant), read by the
        // walsender's or the SQL function's write callback during
        // OutputPluginWrite; `&mut self` excludes any other writer.
        let saved = unsafe { std::mem::replace(&mut (*ctx).write_location, lsn) };
        self.write(message, true);
        // SAFETY: the same field of the same context, put back to the value
        // logical.c set for this callback.
        unsafe { (*ctx).write_location = saved };
    }

    /// The running callback's decoding context (see the construction
    /// invariant), for the other handles of this module's layer.
    pub(in crate::pg) fn context(&self) -> NonNull<pg_sys::LogicalDecodingContext> {
        self.ctx
    }

    /// `OutputPluginUpdateProgress` (PostgreSQL 15 leaves keepalives during
    /// long runs without output to the plugin).
    #[cfg(feature = "pg15")]
    pub fn update_progress(&mut self, skipped_xact: bool) {
        // SAFETY: OutputPluginUpdateProgress may be called from any output
        // callback with its own context (construction invariant); it only
        // calls the context's update_progress callback.
        unsafe { pg_sys::OutputPluginUpdateProgress(self.ctx.as_ptr(), skipped_xact) }
    }

    /// The callback handles the end of a transaction.
    #[cfg(feature = "pg15")]
    pub fn end_xact(&self) -> bool {
        // SAFETY: end_xact is a plain bool of the running callback's context
        // (construction invariant), set by logical.c before the callback.
        unsafe { self.ctx.as_ref().end_xact }
    }
}

/// `ctx->out` showing a message of ours instead of its own buffer, for the
/// duration of one write; its own buffer is put back when this is dropped,
/// also when the write raises an ERROR (pgrx unwinds through the guarded
/// call).
///
/// Construction invariant: `out` is the decoding context's StringInfo just
/// after OutputPluginPrepareWrite left it empty, and the message outlives
/// this value and is not touched meanwhile (it is borrowed mutably).
struct LentStringInfo<'m> {
    out: pg_sys::StringInfo,
    own: pg_sys::StringInfoData,
    _message: PhantomData<&'m mut Vec<u8>>,
}

impl<'m> LentStringInfo<'m> {
    /// # Safety
    /// `out` is a valid StringInfo that the prepare callback left empty, so
    /// that the write callback is to hand on exactly its contents; such a
    /// write callback reads `len` bytes from `data` (the SQL functions'
    /// LogicalOutputWrite copies them into a text datum) and neither
    /// enlarges nor frees the buffer, which is not palloc'd here.
    /// `message` is shorter than MaxAllocSize.
    unsafe fn new(out: pg_sys::StringInfo, message: &'m mut Vec<u8>) -> Self {
        // A StringInfo's data is NUL-terminated, one byte past `len`.
        message.reserve(1);
        message.spare_capacity_mut()[0].write(0);
        // SAFETY: `out` is valid (the caller's contract); its fields are
        // plain values, copied to be put back on drop. The message's
        // `len` bytes and the NUL after them are initialized and stay
        // where they are while `message` is borrowed (for 'm), and len + 1
        // fits an i32 below MaxAllocSize.
        unsafe {
            let own = std::ptr::read(out);
            (*out).data = message.as_mut_ptr().cast();
            (*out).len = message.len() as i32;
            (*out).maxlen = message.len() as i32 + 1;
            (*out).cursor = 0;
            LentStringInfo {
                out,
                own,
                _message: PhantomData,
            }
        }
    }
}

impl Drop for LentStringInfo<'_> {
    fn drop(&mut self) {
        // SAFETY: `out` is still the decoding context's StringInfo
        // (construction invariant); it gets back the fields it had.
        unsafe { std::ptr::write(self.out, self.own) };
    }
}

/// How finished output reaches PostgreSQL.
pub enum OutputText {
    /// As the encoders wrote it (UTF-8 and SQL_ASCII databases).
    AsWritten,
    /// Rewritten as pure ASCII from the database's text.
    Ascii {
        converter: ServerToUtf8,
        /// The rewritten message and the converter's output, kept between
        /// writes.
        out: Vec<u8>,
        scratch: Vec<u8>,
    },
}

impl OutputText {
    /// Chooses for the current database; loads the conversion routine
    /// (from its library, without a catalog lookup: callbacks that run
    /// outside a transaction write output too).
    pub fn for_database() -> Self {
        if server_encoding() != ServerEncoding::Other {
            return OutputText::AsWritten;
        }
        OutputText::Ascii {
            converter: ServerToUtf8::load(),
            out: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// The bytes to hand to PostgreSQL for `message` (it, or its rewriting).
    pub fn prepare<'m>(&'m mut self, message: &'m mut Vec<u8>) -> &'m mut Vec<u8> {
        match self {
            OutputText::AsWritten => message,
            OutputText::Ascii {
                converter,
                out,
                scratch,
            } => {
                out.clear();
                push_ascii_json(out, message, converter, scratch);
                out
            }
        }
    }
}

/// The output not yet handed to PostgreSQL and how it is handed over: one
/// field of the state, so that it can be borrowed beside the format.
pub struct OutputBuffer {
    pub buf: Vec<u8>,
    /// How `buf` is handed over (rewritten as ASCII outside UTF-8).
    pub text: OutputText,
    /// Bytes handed over since the statistics were last published.
    pub bytes_written: u64,
    /// Writes handed over in this session: a mark taken before an item
    /// tells whether the buffer still starts where it did.
    pub writes: u64,
}

impl OutputBuffer {
    pub fn for_database() -> Self {
        OutputBuffer {
            buf: Vec::with_capacity(8192),
            text: OutputText::for_database(),
            bytes_written: 0,
            writes: 0,
        }
    }

    /// The sink a format writes into through `writer`, charging the bytes
    /// to `txn_bytes` (the record of the transaction they belong to; `None`:
    /// output of no transaction, e.g. a non-transactional message).
    pub fn output<'s, 'w>(
        &'s mut self,
        writer: &'s mut Writer<'w>,
        txn_bytes: Option<&'s mut u64>,
    ) -> Output<'s, 'w> {
        Output {
            buffer: self,
            writer,
            txn_bytes,
        }
    }
}

/// The decoding context's writer behind the formats' [`Sink`]: each write
/// hands the buffer to PostgreSQL (rewritten as ASCII outside UTF-8, see
/// [`OutputText`]) and counts the bytes handed over (`Output::count`): the
/// statistics' JSON bytes.
pub struct Output<'s, 'w> {
    buffer: &'s mut OutputBuffer,
    writer: &'s mut Writer<'w>,
    txn_bytes: Option<&'s mut u64>,
}

impl Output<'_, '_> {
    fn count(&mut self, written: usize) {
        self.buffer.bytes_written += written as u64;
        self.buffer.writes += 1;
        if let Some(bytes) = self.txn_bytes.as_deref_mut() {
            *bytes += written as u64;
        }
        self.buffer.buf.clear();
    }
}

impl Sink for Output<'_, '_> {
    fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buffer.buf
    }

    fn write(&mut self, last: bool) {
        let message = self.buffer.text.prepare(&mut self.buffer.buf);
        let written = message.len();
        self.writer.write(message, last);
        self.count(written);
    }

    fn write_at(&mut self, lsn: u64) {
        let message = self.buffer.text.prepare(&mut self.buffer.buf);
        let written = message.len();
        self.writer.write_at(message, lsn);
        self.count(written);
    }
}
