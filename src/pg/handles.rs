//! Safe handles on what PostgreSQL passes to the output plugin callbacks:
//! the decoding context as an output writer, the transaction, the change
//! and its rows, and the relations. The callback shims
//! (`plugin/callbacks.rs`) create them once per call from the raw pointers;
//! each handle borrows for the duration of that call (`'a`), and the
//! decoding core only sees these safe methods.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::ptr::NonNull;

use pgrx::pg_sys;

use crate::model::ChangeKind;
use crate::pg::port::{self, append_to_string_info, RBTXN_SPILLED, RBTXN_STREAMED};

/// The decoding context, for writing output and reporting progress.
pub struct Writer<'a> {
    ctx: NonNull<pg_sys::LogicalDecodingContext>,
    _call: PhantomData<&'a mut pg_sys::LogicalDecodingContext>,
}

impl<'a> Writer<'a> {
    /// # Safety
    /// `ctx` is the decoding context of the running callback, valid for `'a`,
    /// and nothing else writes through it meanwhile.
    pub unsafe fn new(ctx: *mut pg_sys::LogicalDecodingContext) -> Self {
        Writer {
            // SAFETY: PostgreSQL never passes a NULL context.
            ctx: unsafe { NonNull::new_unchecked(ctx) },
            _call: PhantomData,
        }
    }

    /// Hands `bytes` to PostgreSQL as one write (`last`: the end of an
    /// output message).
    pub fn write(&mut self, bytes: &[u8], last: bool) {
        let ctx = self.ctx.as_ptr();
        // SAFETY: the prepare/append/write sequence of every output plugin,
        // on the callback's own context; ctx->out is a valid StringInfo
        // between OutputPluginPrepareWrite and OutputPluginWrite.
        unsafe {
            pg_sys::OutputPluginPrepareWrite(ctx, last);
            append_to_string_info((*ctx).out, bytes);
            pg_sys::OutputPluginWrite(ctx, last);
        }
    }

    /// [`Self::write`] (as the end of a message) reported at `lsn`.
    pub fn write_at(&mut self, bytes: &[u8], lsn: u64) {
        let ctx = self.ctx.as_ptr();
        // SAFETY: write_location is a plain field of the callback's own
        // context, read by the write callbacks and restored at once.
        let saved = unsafe { std::mem::replace(&mut (*ctx).write_location, lsn) };
        self.write(bytes, true);
        // SAFETY: as above.
        unsafe { (*ctx).write_location = saved };
    }

    /// The decoding context's reorder buffer.
    pub fn reorder(&self) -> crate::pg::reorder::Reorder<'_> {
        // SAFETY: the running callback's context (see `new`); the decoder
        // does not touch its reorder buffer while our code runs.
        unsafe { crate::pg::reorder::Reorder::of(self.ctx) }
    }

    /// The reorder buffer's current size in bytes (all transactions).
    pub fn reorder_buffer_size(&self) -> u64 {
        // SAFETY: a decoding context always has its reorder buffer.
        unsafe { (*self.ctx.as_ref().reorder).size as u64 }
    }

    /// `OutputPluginUpdateProgress` (PostgreSQL 15 leaves keepalives during
    /// long runs without output to the plugin).
    #[cfg(feature = "pg15")]
    pub fn update_progress(&mut self, skipped_xact: bool) {
        // SAFETY: accepts any decoding context inside a callback.
        unsafe { pg_sys::OutputPluginUpdateProgress(self.ctx.as_ptr(), skipped_xact) }
    }

    /// The callback handles the end of a transaction.
    #[cfg(feature = "pg15")]
    pub fn end_xact(&self) -> bool {
        // SAFETY: a plain field of a valid context.
        unsafe { self.ctx.as_ref().end_xact }
    }
}

/// A transaction being replayed (`ReorderBufferTXN`).
#[derive(Clone, Copy)]
pub struct Txn<'a>(&'a pg_sys::ReorderBufferTXN);

impl<'a> Txn<'a> {
    /// # Safety
    /// `txn` is a valid transaction for `'a` (the callback's argument).
    pub unsafe fn new(txn: *mut pg_sys::ReorderBufferTXN) -> Self {
        // SAFETY: per the contract.
        Txn(unsafe { &*txn })
    }

    pub fn xid(self) -> u32 {
        self.0.xid.into_inner()
    }

    /// The top-level transaction's xid (its own when it is top-level).
    pub fn top_xid(self) -> u32 {
        let top = self.0.toptxn;
        if top.is_null() {
            self.xid()
        } else {
            // SAFETY: a non-NULL toptxn is the valid top-level transaction,
            // which outlives its subtransactions.
            unsafe { (*top).xid.into_inner() }
        }
    }

    pub fn origin(self) -> u16 {
        self.0.origin_id
    }

    pub fn first_lsn(self) -> u64 {
        self.0.first_lsn
    }

    pub fn final_lsn(self) -> u64 {
        self.0.final_lsn
    }

    pub fn end_lsn(self) -> u64 {
        self.0.end_lsn
    }

    /// Commit (or prepare) time.
    pub fn commit_time(self) -> i64 {
        // SAFETY: xact_time is a union of two TimestampTz; both readings
        // are the same integer.
        unsafe { self.0.xact_time.commit_time }
    }

    /// The gid of a prepared transaction (empty when there is none).
    pub fn gid(self) -> &'a [u8] {
        if self.0.gid.is_null() {
            &[]
        } else {
            // SAFETY: a non-NULL gid is a NUL-terminated string owned by the
            // transaction.
            unsafe { CStr::from_ptr(self.0.gid) }.to_bytes()
        }
    }

    /// Spilled to disk while it was decoded.
    pub fn spilled(self) -> bool {
        self.0.txn_flags & RBTXN_SPILLED != 0
    }

    /// Streamed before its end.
    pub fn streamed(self) -> bool {
        self.0.txn_flags & RBTXN_STREAMED != 0
    }
}

/// A decoded heap tuple of a change (not NULL).
#[derive(Clone, Copy)]
pub struct Tuple<'a> {
    tuple: NonNull<pg_sys::HeapTupleData>,
    _change: PhantomData<&'a pg_sys::HeapTupleData>,
}

impl Tuple<'_> {
    fn new(tuple: pg_sys::HeapTuple) -> Option<Self> {
        NonNull::new(tuple).map(|tuple| Tuple {
            tuple,
            _change: PhantomData,
        })
    }

    pub(crate) fn as_ptr(self) -> pg_sys::HeapTuple {
        self.tuple.as_ptr()
    }
}

/// A slot holding a row, valid for `'a`.
#[derive(Clone, Copy)]
pub struct SlotRow<'a> {
    slot: NonNull<pg_sys::TupleTableSlot>,
    _held: PhantomData<&'a pg_sys::TupleTableSlot>,
}

impl SlotRow<'_> {
    pub(crate) fn as_ptr(self) -> *mut pg_sys::TupleTableSlot {
        self.slot.as_ptr()
    }

    /// # Safety
    /// `slot` holds a tuple and stays unchanged for the lifetime.
    pub unsafe fn new(slot: NonNull<pg_sys::TupleTableSlot>) -> Self {
        SlotRow {
            slot,
            _held: PhantomData,
        }
    }
}

/// An INSERT, UPDATE or DELETE (`ReorderBufferChange`).
#[derive(Clone, Copy)]
pub struct Change<'a>(&'a pg_sys::ReorderBufferChange);

impl<'a> Change<'a> {
    /// # Safety
    /// `change` is a valid change for `'a` (the callback's argument).
    pub unsafe fn new(change: *mut pg_sys::ReorderBufferChange) -> Self {
        // SAFETY: per the contract.
        Change(unsafe { &*change })
    }

    pub fn lsn(self) -> u64 {
        self.0.lsn
    }

    /// The (sub)transaction the change belongs to.
    pub fn xid(self) -> u32 {
        // SAFETY: a queued change always points to its transaction.
        unsafe { (*self.0.txn).xid.into_inner() }
    }

    /// The change's kind, `None` for the internal kinds a plugin never sees
    /// in change_cb.
    pub fn kind(self) -> Option<ChangeKind> {
        use pg_sys::ReorderBufferChangeType::*;
        match self.0.action {
            REORDER_BUFFER_CHANGE_INSERT => Some(ChangeKind::Insert),
            REORDER_BUFFER_CHANGE_UPDATE => Some(ChangeKind::Update),
            REORDER_BUFFER_CHANGE_DELETE => Some(ChangeKind::Delete),
            _ => None,
        }
    }

    /// The new and the old row, as decoded (`None` where the WAL has none).
    pub fn rows(self) -> (Option<Tuple<'a>>, Option<Tuple<'a>>) {
        if self.kind().is_none() {
            return (None, None);
        }
        // SAFETY: for INSERT/UPDATE/DELETE `data.tp` is the active member of
        // the union, and its tuples live as long as the change.
        unsafe {
            let tp = &self.0.data.tp;
            (
                Tuple::new(port::change_tuple(tp.newtuple)),
                Tuple::new(port::change_tuple(tp.oldtuple)),
            )
        }
    }
}

/// An open relation passed to a callback.
#[derive(Clone, Copy)]
pub struct Rel<'a> {
    rel: NonNull<pg_sys::RelationData>,
    _open: PhantomData<&'a pg_sys::RelationData>,
}

impl<'a> Rel<'a> {
    /// # Safety
    /// `rel` is an open relation for `'a`.
    pub unsafe fn new(rel: pg_sys::Relation) -> Self {
        Rel {
            // SAFETY: PostgreSQL passes open relations, never NULL.
            rel: unsafe { NonNull::new_unchecked(rel) },
            _open: PhantomData,
        }
    }

    /// The relations of a TRUNCATE.
    ///
    /// # Safety
    /// `relations` holds `n` open relations for `'a`.
    pub unsafe fn slice(relations: *mut pg_sys::Relation, n: i32) -> Vec<Rel<'a>> {
        if n <= 0 {
            return Vec::new();
        }
        // SAFETY: per the contract.
        let all = unsafe { std::slice::from_raw_parts(relations, n as usize) };
        // SAFETY: each entry is an open relation.
        all.iter().map(|&r| unsafe { Rel::new(r) }).collect()
    }

    pub fn oid(self) -> pg_sys::Oid {
        // SAFETY: a field of an open relation.
        unsafe { self.rel.as_ref().rd_id }
    }

    /// A partition (`relispartition`).
    pub fn is_partition(self) -> bool {
        // SAFETY: an open relation's rd_rel is valid.
        unsafe { (*self.rel.as_ref().rd_rel).relispartition }
    }

    pub(crate) fn as_ptr(self) -> pg_sys::Relation {
        self.rel.as_ptr()
    }
}

/// The bytes of a message's prefix and content.
///
/// # Safety
/// `prefix` is a NUL-terminated string and `content` has `size` bytes, both
/// valid for `'a`.
pub unsafe fn message_parts<'a>(
    prefix: *const std::os::raw::c_char,
    content: *const std::os::raw::c_char,
    size: usize,
) -> (&'a [u8], &'a [u8]) {
    // SAFETY: per the contract.
    unsafe {
        let prefix = CStr::from_ptr(prefix).to_bytes();
        let content = if size == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(content as *const u8, size)
        };
        (prefix, content)
    }
}

/// A memory context for what one change allocates (detoasted values,
/// output function results), reset after each.
#[derive(Clone, Copy)]
pub struct ChangeMemory(NonNull<pg_sys::MemoryContextData>);

impl ChangeMemory {
    /// # Safety
    /// `memory` is a valid context that outlives this value and is used
    /// for nothing else.
    pub unsafe fn new(memory: pg_sys::MemoryContext) -> Self {
        // SAFETY: a created context is never NULL.
        ChangeMemory(unsafe { NonNull::new_unchecked(memory) })
    }

    /// Runs `f` with the context current, then resets it.
    pub fn run<R>(self, f: impl FnOnce() -> R) -> R {
        let memory = self.0.as_ptr();
        // SAFETY: switching to (and resetting) a context of our own; if `f`
        // raises an ERROR, PostgreSQL's error recovery restores
        // CurrentMemoryContext; nothing allocated in it is used after `f`.
        unsafe {
            let old = pg_sys::MemoryContextSwitchTo(memory);
            let result = f();
            pg_sys::MemoryContextSwitchTo(old);
            port::reset_memory_context(memory);
            result
        }
    }
}
