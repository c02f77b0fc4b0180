//! Safe handles on what PostgreSQL passes to the output plugin callbacks:
//! the decoding context as an output writer, the transaction, the change
//! and its rows, and the relations. The callback shims
//! (`plugin/callbacks.rs`) create them once per call from the raw pointers;
//! each handle borrows for the duration of that call (`'a`), and the
//! decoding core only sees these safe methods.
//!
//! The unsafe constructors here are the only place a caller promises
//! anything: each states, once, what PostgreSQL guarantees about the
//! pointer it wraps. Every method then relies on that construction
//! invariant alone, and its `unsafe` block names the field and the
//! guarantee it reads.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::ptr::NonNull;

use pgrx::pg_sys;

use crate::pg::port::{self, RBTXN_SPILLED, RBTXN_STREAMED};
use pubjson_core::model::ChangeKind;

/// Proof that the code holding it runs inside a decoding callback, where
/// catalog lookups are allowed (a transaction with the historic snapshot):
/// made only from a relation handle, which only a callback has.
#[derive(Clone, Copy)]
pub struct InCallback<'a>(std::marker::PhantomData<Rel<'a>>);

impl<'a> InCallback<'a> {
    pub fn of(_rel: Rel<'a>) -> Self {
        InCallback(std::marker::PhantomData)
    }

    /// # Safety
    /// Called from a transactional message callback (`txn` its
    /// transaction): ReorderBufferProcessTXN runs those inside the
    /// transaction's replay, with the historic snapshot set up, as it runs
    /// change callbacks; `'a` ends before the callback returns.
    pub unsafe fn of_transactional_message(_txn: Txn<'a>) -> Self {
        InCallback(std::marker::PhantomData)
    }
}

/// A row in a slot (`TupleTableSlot`), in the layout of the relation the
/// slot was made for, unchanged while borrowed (`'a`). The publication
/// code (`PublishedRows`) makes them: a change's rows converted to a
/// published ancestor's layout, or held for a row filter.
///
/// Construction invariant: the slot is not NULL, holds a row, and keeps
/// it unchanged for `'a`.
#[derive(Clone, Copy)]
pub struct SlotRow<'a> {
    slot: NonNull<pg_sys::TupleTableSlot>,
    _held: PhantomData<&'a pg_sys::TupleTableSlot>,
}

impl<'a> SlotRow<'a> {
    /// # Safety
    /// `slot` is not NULL, holds a row, and keeps it unchanged for `'a`.
    pub unsafe fn new(slot: *mut pg_sys::TupleTableSlot) -> Self {
        SlotRow {
            // SAFETY: not NULL (the caller's contract).
            slot: unsafe { NonNull::new_unchecked(slot) },
            _held: PhantomData,
        }
    }

    pub fn as_ptr(self) -> *mut pg_sys::TupleTableSlot {
        self.slot.as_ptr()
    }
}

/// A transaction being replayed (`ReorderBufferTXN`).
///
/// Construction invariant: the transaction is the one PostgreSQL passed to
/// the running callback, so its pointers (`toptxn`, `gid`) are as the
/// reorder buffer set them, and it is not freed for `'a`.
#[derive(Clone, Copy)]
pub struct Txn<'a>(&'a pg_sys::ReorderBufferTXN);

impl<'a> Txn<'a> {
    /// # Safety
    /// `txn` is the non-NULL transaction a decoding callback received, and
    /// `'a` ends before that callback returns (the reorder buffer frees
    /// transactions only between callbacks).
    pub unsafe fn new(txn: *mut pg_sys::ReorderBufferTXN) -> Self {
        // SAFETY: non-NULL, aligned and live for 'a: the callback's own
        // argument, as the caller promises.
        Txn(unsafe { &*txn })
    }

    pub fn xid(self) -> u32 {
        self.0.xid.into_inner()
    }

    /// Whether `xid` is this transaction's or one of its subtransactions'
    /// (those the reorder buffer knows of).
    pub fn has_xid(self, xid: u32) -> bool {
        if self.xid() == xid {
            return true;
        }
        // SAFETY: a transaction's `subtxns` is a valid dlist (dlist_init'ed
        // with it) linking its subtransactions through their `node` member;
        // ReorderBufferCleanupTXN unlinks a subtransaction before freeing
        // it, so every element is live while `self.0` is (the callback's
        // transaction, construction invariant).
        unsafe {
            port::dlist_elements::<pg_sys::ReorderBufferTXN>(
                &self.0.subtxns,
                std::mem::offset_of!(pg_sys::ReorderBufferTXN, node),
            )
            .any(|sub| (*sub).xid.into_inner() == xid)
        }
    }

    /// The top-level transaction's xid (its own when it is top-level).
    pub fn top_xid(self) -> u32 {
        let top = self.0.toptxn;
        if top.is_null() {
            self.xid()
        } else {
            // SAFETY: reorderbuffer.c sets a subtransaction's toptxn to its
            // top-level ReorderBufferTXN, which it frees only after (and
            // together with) its subtransactions: live as long as `self.0`.
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
        // SAFETY: xact_time is a union of two TimestampTz (commit_time,
        // prepare_time): every bit pattern is a valid i64 whichever member
        // was written.
        unsafe { self.0.xact_time.commit_time }
    }

    /// The gid of a prepared transaction (empty when there is none).
    pub fn gid(self) -> &'a [u8] {
        if self.0.gid.is_null() {
            &[]
        } else {
            // SAFETY: a non-NULL gid is the NUL-terminated string
            // reorderbuffer.c pstrdup'ed into the transaction, freed with
            // it (so not before 'a ends: construction invariant).
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

    /// The transaction changed the catalogs (so far as decoded: the flag is
    /// set when a catalog change is decoded, before the changes that
    /// follow it are replayed; a subtransaction's sets its top-level
    /// transaction's too).
    pub fn has_catalog_changes(self) -> bool {
        let flag = pg_sys::RBTXN_HAS_CATALOG_CHANGES;
        if self.0.txn_flags & flag != 0 {
            return true;
        }
        let top = self.0.toptxn;
        // SAFETY: as in top_xid: a subtransaction's toptxn lives as long
        // as the subtransaction.
        !top.is_null() && unsafe { (*top).txn_flags } & flag != 0
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

/// An INSERT, UPDATE or DELETE (`ReorderBufferChange`).
///
/// Construction invariant: the change is the one PostgreSQL passed to the
/// running callback: queued in its transaction (`txn` set), with the
/// union member its `action` says, and not freed for `'a`.
#[derive(Clone, Copy)]
pub struct Change<'a>(&'a pg_sys::ReorderBufferChange);

impl<'a> Change<'a> {
    /// # Safety
    /// `change` is the non-NULL change a decoding callback received (change,
    /// truncate or message callback), and `'a` ends before that callback
    /// returns (the reorder buffer frees a change after its callback).
    pub unsafe fn new(change: *mut pg_sys::ReorderBufferChange) -> Self {
        // SAFETY: non-NULL, aligned and live for 'a: the callback's own
        // argument, as the caller promises.
        Change(unsafe { &*change })
    }

    pub fn lsn(self) -> u64 {
        self.0.lsn
    }

    /// The (sub)transaction the change belongs to.
    pub fn xid(self) -> u32 {
        // SAFETY: ReorderBufferQueueChange sets `txn` to the change's
        // (sub)transaction before queuing it, and a transaction outlives its
        // changes (construction invariant: a change being replayed).
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
        // SAFETY: for INSERT/UPDATE/DELETE (checked above) `data.tp` is the
        // active member of the union; its newtuple/oldtuple are NULL or
        // tuples the reorder buffer allocated for this change and frees
        // with it (construction invariant: live for 'a).
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
///
/// Construction invariant: the relation is open (its relcache entry pinned)
/// for `'a`, and `'a` ends before the decoding callback that runs returns.
/// So a `Rel` also witnesses that the code runs inside a decoding callback,
/// in its transaction under the historic snapshot: where syscache and
/// relcache lookups are allowed.
#[derive(Clone, Copy)]
pub struct Rel<'a> {
    rel: NonNull<pg_sys::RelationData>,
    _open: PhantomData<&'a pg_sys::RelationData>,
}

impl<'a> Rel<'a> {
    /// # Safety
    /// `rel` is a non-NULL relation, open for `'a`: a decoding callback's
    /// argument or one the callback opened and closes after `'a`; `'a` ends
    /// before that callback returns.
    pub unsafe fn new(rel: pg_sys::Relation) -> Self {
        Rel {
            // SAFETY: non-NULL as the caller promises (PostgreSQL passes
            // callbacks open relations, never NULL).
            rel: unsafe { NonNull::new_unchecked(rel) },
            _open: PhantomData,
        }
    }

    /// The relations of a TRUNCATE.
    ///
    /// # Safety
    /// `relations` is the truncate callback's array of `n` relations, each
    /// open for `'a`, and `'a` ends before that callback returns.
    pub unsafe fn slice(relations: *mut pg_sys::Relation, n: i32) -> Vec<Rel<'a>> {
        if n <= 0 {
            return Vec::new();
        }
        // SAFETY: the caller promises `n` (> 0, checked above) initialized
        // Relation pointers at `relations`, an array ReorderBufferProcessTXN
        // keeps until the callback returns.
        let all = unsafe { std::slice::from_raw_parts(relations, n as usize) };
        // SAFETY: each entry is a relation ReorderBufferProcessTXN opened
        // (RelationIdGetRelation) for the callback and closes after it:
        // non-NULL and open for 'a, as `new` requires.
        all.iter().map(|&r| unsafe { Rel::new(r) }).collect()
    }

    pub fn oid(self) -> pg_sys::Oid {
        // SAFETY: rd_id is a plain field of the relcache entry, which stays
        // allocated while the relation is open (construction invariant).
        unsafe { self.rel.as_ref().rd_id }
    }

    /// A partition (`relispartition`).
    pub fn is_partition(self) -> bool {
        // SAFETY: rd_rel, the entry's pg_class row, is set for every open
        // relation and lives as long as the relcache entry (construction
        // invariant: open for 'a).
        unsafe { (*self.rel.as_ref().rd_rel).relispartition }
    }

    pub(crate) fn as_ptr(self) -> pg_sys::Relation {
        self.rel.as_ptr()
    }

    /// The OID of the relation's row type and its attribute count.
    fn row_type(self) -> (pg_sys::Oid, usize) {
        // SAFETY: rd_rel and rd_att are set for every open relation and
        // live as long as the relcache entry (construction invariant).
        unsafe {
            let rel = self.rel.as_ref();
            ((*rel.rd_rel).reltype, (*rel.rd_att).natts.max(0) as usize)
        }
    }
}

/// A relation a callback opens by OID (a backfill message names its
/// relation) under the historic snapshot; closed when dropped.
pub struct OpenedRel<'a> {
    rel: Rel<'a>,
}

impl<'a> OpenedRel<'a> {
    /// `None` when the catalog as of the decoded position has no such
    /// relation.
    pub fn open(_catalog: InCallback<'a>, relid: u32) -> Option<Self> {
        // SAFETY: InCallback proves a decoding callback inside the
        // transaction's replay, where relcache lookups are allowed;
        // RelationIdGetRelation returns NULL for an OID without a relation,
        // else the entry with its reference count raised (released in Drop,
        // or by the transaction's abort).
        let rel = unsafe { pg_sys::RelationIdGetRelation(pg_sys::Oid::from(relid)) };
        // SAFETY: non-NULL (checked) and open until Drop, which the borrow
        // of `rel()` cannot outlive.
        (!rel.is_null()).then(|| OpenedRel {
            rel: unsafe { Rel::new(rel) },
        })
    }

    pub fn rel(&self) -> Rel<'_> {
        self.rel
    }
}

impl Drop for OpenedRel<'_> {
    fn drop(&mut self) {
        // SAFETY: opened in `open`, closed once.
        unsafe { pg_sys::RelationClose(self.rel.as_ptr()) }
    }
}

/// A row of a backfill message as a heap tuple of its relation: the bytes
/// of a composite datum of the relation's row type (a heap tuple header and
/// the row's data, detoasted), copied into aligned memory.
pub struct OwnedTuple {
    /// The datum, 8-byte aligned (MAXALIGN) as heap tuples are.
    words: Vec<u64>,
    header: pg_sys::HeapTupleData,
}

impl OwnedTuple {
    /// `None` unless `bytes` have a composite datum's header for `rel`'s
    /// row type: its length, a data offset inside it, no more attributes
    /// than the relation, the relation's row type. (The message that
    /// carries them was authenticated, see `pubjson_core::protocol::backfill`: this guards
    /// against a layout that changed, not against forgery.)
    pub fn from_composite(rel: Rel<'_>, bytes: &[u8]) -> Option<OwnedTuple> {
        const HEADER: usize = std::mem::offset_of!(pg_sys::HeapTupleHeaderData, t_bits);
        if bytes.len() < HEADER || bytes.len() > u32::MAX as usize / 4 {
            return None;
        }
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        // SAFETY: `words` holds at least bytes.len() bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                words.as_mut_ptr() as *mut u8,
                bytes.len(),
            )
        };
        let data = words.as_mut_ptr() as *mut pg_sys::HeapTupleHeaderData;
        let (row_type, natts) = rel.row_type();
        // SAFETY: `data` is 8-byte aligned and has at least HEADER
        // initialized bytes: the fixed part of a HeapTupleHeaderData read
        // here (a composite datum's fields of t_choice, t_infomask2,
        // t_hoff); its first four bytes are a 4-byte varlena header.
        let well_formed = unsafe {
            let header = &*data;
            let len = pgrx::varlena::varsize_4b(data as *const pg_sys::varlena);
            let hoff = header.t_hoff as usize;
            let tuple_natts = (header.t_infomask2 as u32 & pg_sys::HEAP_NATTS_MASK) as usize;
            let has_nulls = header.t_infomask as u32 & pg_sys::HEAP_HASNULL != 0;
            len == bytes.len()
                && hoff >= HEADER
                && hoff <= len
                && hoff.is_multiple_of(8)
                && tuple_natts <= natts
                && (!has_nulls || HEADER + tuple_natts.div_ceil(8) <= hoff)
                && header.t_choice.t_datum.datum_typeid == row_type
        };
        if !well_formed {
            return None;
        }
        // SAFETY: HeapTupleData is plain data; all-zero is a valid value
        // (an invalid t_self, no table) before the fields are set.
        let mut header: pg_sys::HeapTupleData = unsafe { std::mem::zeroed() };
        header.t_len = bytes.len() as u32;
        header.t_tableOid = rel.oid();
        header.t_data = data;
        Some(OwnedTuple { words, header })
    }

    pub fn tuple(&self) -> Tuple<'_> {
        let _ = &self.words;
        Tuple {
            tuple: NonNull::from(&self.header),
            _change: PhantomData,
        }
    }
}

/// The bytes of a message's prefix and content.
///
/// # Safety
/// `prefix` is a NUL-terminated string and `content` has `size` bytes (or
/// is anything when `size` is 0), both valid and unchanged for `'a`: the
/// message callback's arguments, with `'a` ending before it returns.
pub unsafe fn message_parts<'a>(
    prefix: *const std::os::raw::c_char,
    content: *const std::os::raw::c_char,
    size: usize,
) -> (&'a [u8], &'a [u8]) {
    // SAFETY: CStr::from_ptr needs a NUL-terminated string live for 'a, and
    // from_raw_parts `size` (> 0 in that branch) initialized bytes live for
    // 'a: both exactly what the caller promises (they point into the
    // decoded WAL record, or into the queued change of a transactional
    // message, both kept until the callback returns).
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
///
/// Construction invariant: the context outlives every copy of this value
/// and nothing else allocates in it or resets it.
#[derive(Clone, Copy)]
pub struct ChangeMemory(NonNull<pg_sys::MemoryContextData>);

impl ChangeMemory {
    /// # Safety
    /// `memory` is a non-NULL context that outlives this value and its
    /// copies (the slot's state keeps them; it is dropped with the
    /// context's parent) and is used for nothing else.
    pub unsafe fn new(memory: pg_sys::MemoryContext) -> Self {
        // SAFETY: non-NULL as the caller promises (AllocSetContextCreate
        // returns a context or raises an ERROR).
        ChangeMemory(unsafe { NonNull::new_unchecked(memory) })
    }

    /// Runs `f` with the context current, then resets it.
    pub fn run<R>(self, f: impl FnOnce() -> R) -> R {
        let memory = self.0.as_ptr();
        // SAFETY: the context is valid and ours alone (construction
        // invariant), so switching to it and resetting it after `f` frees
        // only what `f` allocated there, and `f`'s result is a Rust value
        // that borrows none of it; if `f` raises an ERROR, PostgreSQL's
        // error recovery restores CurrentMemoryContext.
        unsafe {
            let old = pg_sys::MemoryContextSwitchTo(memory);
            let result = f();
            pg_sys::MemoryContextSwitchTo(old);
            port::reset_memory_context(memory);
            result
        }
    }
}

/// The relation cache's memory context, lent to what builds an entry: valid
/// for as long as the cache exists (the contract of `RelationCache::new`),
/// and `'c` is a borrow of the cache. Only the cache (`pg/relation.rs`)
/// makes one.
#[derive(Clone, Copy)]
pub struct CacheMemory<'c> {
    pub(in crate::pg) context: pg_sys::MemoryContext,
    pub(in crate::pg) cache: PhantomData<&'c ()>,
}

impl CacheMemory<'_> {
    /// The context, valid while this borrow of the cache lasts.
    pub fn context(self) -> pg_sys::MemoryContext {
        self.context
    }
}

/// Whether relation `relid` (of any kind) exists in the catalog as it is
/// at the position being decoded; `None` when the caller is not replaying
/// a transaction under the historic snapshot (see [`with_table`]).
pub fn relation_exists(relid: u32) -> Option<bool> {
    // SAFETY: both read backend-local state and have no preconditions.
    let replaying = unsafe { pg_sys::IsTransactionState() && pg_sys::HistoricSnapshotActive() };
    if !replaying {
        return None;
    }
    // SAFETY: a syscache probe with an OID key, in a transaction under the
    // historic snapshot (checked above).
    Some(unsafe {
        pg_sys::SearchSysCacheExists(
            pg_sys::SysCacheIdentifier::RELOID as i32,
            pg_sys::Datum::from(pg_sys::Oid::from(relid)),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
        )
    })
}

/// Runs `f` on table `relid` (an ordinary or partitioned table) as the
/// catalog is at the position being decoded, or returns `None`: when no
/// such table exists there (dropped, never was, or another kind of
/// relation), or when the caller is not replaying a transaction under the
/// historic snapshot (only a transactional message's callback asks), which
/// is checked here rather than promised.
pub fn with_table<R>(relid: u32, f: impl FnOnce(Rel<'_>) -> R) -> Option<R> {
    // SAFETY: both read backend-local state and have no preconditions.
    let replaying = unsafe { pg_sys::IsTransactionState() && pg_sys::HistoricSnapshotActive() };
    if !replaying || relid == 0 {
        return None;
    }
    // SAFETY: in a transaction under the historic snapshot (checked above)
    // a relcache lookup is allowed; it returns NULL for an OID the
    // snapshot's catalog does not have.
    let rel = unsafe { pg_sys::RelationIdGetRelation(pg_sys::Oid::from(relid)) };
    if rel.is_null() {
        return None;
    }
    // SAFETY: `rel` is open (non-NULL, pinned by RelationIdGetRelation);
    // rd_rel is set for every open relation.
    let relkind = unsafe { (*(*rel).rd_rel).relkind } as u8;
    let result = (relkind == pg_sys::RELKIND_RELATION
        || relkind == pg_sys::RELKIND_PARTITIONED_TABLE)
        // SAFETY: `rel` stays open until RelationClose below, after `f`
        // returned, and `f`'s Rel cannot outlive the call (its lifetime is
        // the closure's).
        .then(|| f(unsafe { Rel::new(rel) }));
    // SAFETY: closes the reference opened above (an ERROR in `f` leaves it
    // to the transaction's resource owner, which releases it at abort).
    unsafe { pg_sys::RelationClose(rel) };
    result
}
